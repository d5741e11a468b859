package sysrun

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
)

// FieldProblems are the publishes (XADDs) the services' broker proxies relayed to the
// scenario's stream without a field the system file's stream mapping names
// (stream.event_id, stream.payload): the history read through that mapping
// would be meaningless (an event id "" acked without an effect), so the
// mismatch is reported for what it is, once per service, field and field
// set, in start order.
func (r *Run) FieldProblems() []error {
	r.mu.Lock()
	logs := slices.Clone(r.logs)
	r.mu.Unlock()
	stream := r.cfg.Vars["stream"]
	want := []struct {
		key, field string
		pos        diag.Pos
	}{
		{"stream.event_id", r.cfg.System.Stream.EventID, r.cfg.System.Stream.EventIDPos},
		{"stream.payload", r.cfg.System.Stream.Payload, r.cfg.System.Stream.PayloadPos},
	}
	type problem struct {
		msg string
		n   int
	}
	var problems []*problem
	seen := map[string]*problem{}
	for _, l := range logs {
		for _, p := range l.proxy.Wire(broker.WireMap{}).Publishes {
			if p.Fields == nil || stream != "" && p.Dest != stream {
				continue
			}
			for _, w := range want {
				if slices.Contains(p.Fields, w.field) || w.field == "" {
					continue
				}
				key := l.service + "\x00" + w.field + "\x00" + strings.Join(p.Fields, "\x00")
				if seen[key] == nil {
					seen[key] = &problem{msg: fmt.Sprintf("service %s: %s carried no field %q (the system file's %s, at %s); its fields: %s",
						l.service, p.Op, w.field, w.key, w.pos, strings.Join(p.Fields, ", "))}
					problems = append(problems, seen[key])
				}
				seen[key].n++
			}
		}
	}
	var errs []error
	for _, p := range problems {
		if p.n > 1 {
			p.msg += fmt.Sprintf(" (%d such XADDs)", p.n)
		}
		errs = append(errs, errors.New(p.msg))
	}
	return errs
}
