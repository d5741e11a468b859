package sysrun

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/diag"
)

// FieldProblems are the publishes (XADDs) the services' broker proxies relayed to the
// scenario's stream without a field the system file's stream mapping names
// (stream.event_id, stream.payload), and, on the other brokers, the
// messages published or delivered with no event id where the wire looks
// (broker.Wire's EventIDFrom): the history read through that mapping
// would be meaningless (an event id "" acked without an effect), so the
// mismatch is reported for what it is, once per service and field set (or
// operation), in start order.
func (w *Wire) FieldProblems() []error {
	r := w.r
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
	for i, l := range w.logs {
		w := w.wires[i]
		for _, p := range append(w.Publishes, w.Deliveries...) {
			if !r.ours(p) {
				continue // elsewhere: not the scenario's events
			}
			if p.Fields == nil && p.EventID == "" && w.EventIDFrom != "" {
				// No field list to name (not Redis): the wire's own places.
				key := l.service + "\x00" + p.Op
				if seen[key] == nil {
					seen[key] = &problem{msg: fmt.Sprintf("service %s: %s carried no event id where the runner looks for it: %s", l.service, p.Op, w.EventIDFrom)}
					problems = append(problems, seen[key])
				}
				seen[key].n++
				continue
			}
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
			p.msg += fmt.Sprintf(" (%d such messages)", p.n)
		}
		errs = append(errs, errors.New(p.msg))
	}
	return errs
}
