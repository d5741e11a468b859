package sysrun

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/system"
)

// brokerLog is one service start's broker proxy: what it relayed stays
// readable after the service stopped.
type brokerLog struct {
	service string
	start   int // the run's Nth service start, from 1
	proxy   broker.Proxy
	svc     *service
}

// Wire is what the run's broker proxies relayed up to one moment, each
// proxy's record decoded once: broker.Proxy.Wire decodes all of it anew
// on every call, and the history (Ops), what the wire says of itself
// (NotJudged, Copies), MovedAside, ReadAs, Consumers and FieldProblems
// all read the same records. A reader that needs several of them takes
// one Wire (settling one per look at what is owed, the verdict one once
// the system settled), and they agree with each other.
type Wire struct {
	r     *Run
	logs  []brokerLog
	wires []broker.Wire // per log
	// strikes are the times the database faults armed for each log's
	// service struck, sorted (the broker's are counted in the proxy's
	// record: broker.WireMsg's Pass).
	strikes [][]time.Time

	once sync.Once // the history, made of the records once
	ops  []history.Op
	kind broker.Wire
}

// Wire decodes what every broker proxy of the run relayed so far, once.
func (r *Run) Wire() *Wire {
	r.mu.Lock()
	logs := slices.Clone(r.logs)
	r.mu.Unlock()
	w := &Wire{r: r, logs: logs, wires: make([]broker.Wire, len(logs)), strikes: make([][]time.Time, len(logs))}
	m := broker.WireMap{EventID: r.cfg.System.Stream.EventID, Payload: r.cfg.System.Stream.Payload}
	for i, l := range logs {
		w.strikes[i] = r.strikes(l.svc)
		w.wires[i] = l.proxy.Wire(m)
	}
	return w
}

// Ops is the history the services' broker proxies saw, in wire order: each
// publish, each delivery (its outcome is the consumer's own business:
// history.Delivered) and whether the consumer acked it. The system file's
// stream mapping says where the event id and payload are.
func (w *Wire) Ops() []history.Op {
	ops, _ := w.history()
	return ops
}

// NotJudged are the invariants the broker's wire cannot support, with
// why ("" keys none); nil when the broker has no proxy.
func (w *Wire) NotJudged() map[string]string {
	_, kind := w.history()
	return kind.NotJudged
}

// Copies reports whether the broker's entries are counted, not followed
// (broker.Wire's Copies).
func (w *Wire) Copies() bool {
	_, kind := w.history()
	return kind.Copies
}

// history is the history and what the broker's wire says of itself (its
// NotJudged and Copies; no messages).
func (w *Wire) history() ([]history.Op, broker.Wire) {
	w.once.Do(func() { w.ops, w.kind = w.build() })
	return slices.Clone(w.ops), w.kind
}

func (w *Wire) build() ([]history.Op, broker.Wire) {
	r := w.r
	type timed struct {
		at time.Time
		op history.Op
	}
	var all []timed
	var kind broker.Wire
	var full []string // the services whose broker proxy's record was full
	for i, l := range w.logs {
		where := fmt.Sprintf("%s (service %s, start %d, via its broker proxy)", r.cfg.System.File, l.service, l.start)
		// One service process is one "step" up to a fault that struck it:
		// a duplicate within one pass is a double publish; what it
		// publishes again after a fault is an at-least-once retry.
		// A broker fault's pass is the proxy's to count (WireMsg.Pass); a
		// database fault's is told by the time it struck.
		dbStrikes := w.strikes[i]
		lw := w.wires[i]
		kind.NotJudged, kind.Copies = lw.NotJudged, lw.Copies
		if lw.Dropped > 0 {
			full = append(full, fmt.Sprintf("%s (start %d): %d events left out", l.service, l.start, lw.Dropped))
		}
		for _, p := range lw.Publishes {
			if !r.ours(p) {
				continue
			}
			step := 1<<20 + l.start<<10 + passOf(dbStrikes, p.At) + p.Pass
			all = append(all, timed{p.At, history.Op{Step: where + " " + p.Op, StepN: step, Kind: history.Publish,
				EventID: p.EventID, EntryID: p.EntryID, Payload: p.Payload, At: p.At, Proc: history.Proc{N: l.start, Service: l.service, Pass: p.Pass}}})
		}
		for _, d := range lw.Deliveries {
			if !r.ours(d) {
				continue
			}
			c := r.consumerOf(d.Group)
			all = append(all, timed{d.At, history.Op{Step: where + " " + d.Op, StepN: 1<<20 + l.start<<10, Kind: history.Delivered,
				EventID: d.EventID, EntryID: d.EntryID, Consumer: c, Model: c, Payload: d.Payload, Acked: d.Acked, At: d.At, Proc: history.Proc{N: l.start, Service: l.service, Pass: d.Pass}}})
		}
	}
	if len(full) > 0 {
		kind.NotJudged = recordFull(kind.NotJudged, full)
	}
	slices.SortStableFunc(all, func(a, b timed) int { return a.at.Compare(b.at) })
	out := make([]history.Op, len(all))
	for i, t := range all {
		out[i] = t.op
	}
	return out, kind
}

// MovedAside are the events a consuming service published itself to
// another destination than the scenario's after the broker handed them to
// it: event id → the publish it made, with its payload. One published to
// the system file's dead_letter: destination is marked Declared (its Op
// says so): the checker counts it dead-lettered when it kept the committed
// payload. Any other (a retry topic, an output) is only a hint for a
// witness: a consumer that forwards an event elsewhere has not finished it.
func (w *Wire) MovedAside() map[string]broker.WireMsg {
	r := w.r
	dl, _ := system.Expand(r.cfg.System.DeadLetter, r.cfg.Vars) // checked at load
	out := map[string]broker.WireMsg{}
	for i, l := range w.logs {
		w := w.wires[i]
		handed := map[string]time.Time{}
		for _, d := range w.Deliveries {
			if _, ok := handed[d.EventID]; !ok && r.ours(d) {
				handed[d.EventID] = d.At
			}
		}
		for _, p := range w.Publishes {
			if at, ok := handed[p.EventID]; ok && !r.ours(p) && !p.At.Before(at) {
				if prev, seen := out[p.EventID]; seen && strings.HasSuffix(prev.Op, DeadLetterOp) {
					continue // a declared dead letter stands
				}
				p.Op = fmt.Sprintf("service %s (start %d) published it to %s", l.service, l.start, p.Dest)
				if dl != "" && p.Dest == dl {
					p.Op += DeadLetterOp
				}
				out[p.EventID] = p
			}
		}
	}
	return out
}

// ReadAs maps each service to the consumer ids it was handed deliveries
// as, from its broker proxies' records (a Kafka group, a JetStream
// durable, a RabbitMQ queue, each the consumer id it stands for): where a
// proxy does not tell the groups a live service reads (Live.Groups), this
// says which consumer owes what.
func (w *Wire) ReadAs() map[string][]string {
	r := w.r
	out := map[string][]string{}
	for i, l := range w.logs {
		for _, d := range w.wires[i].Deliveries {
			if c := r.consumerOf(d.Group); c != "" && r.ours(d) && !slices.Contains(out[l.service], c) {
				out[l.service] = append(out[l.service], c)
			}
		}
	}
	return out
}

// DeadLetterOp ends the Op of a MovedAside publish to the declared
// dead-letter destination.
const DeadLetterOp = ", its dead-letter destination (dead_letter:)"

// ours reports whether m went to the scenario's own destination (its
// stream, topic, subject or exchange): what a service published elsewhere
// (an output topic, its own dead-letter stream) is not the history of the
// scenario's events on the broker, whose entries the checker counts.
func (r *Run) ours(m broker.WireMsg) bool {
	dest := r.cfg.Vars["destination"]
	return m.Dest == "" || dest == "" || m.Dest == dest
}

// consumerOf is the consumer id a broker group stands for: the services
// are told ${group} (or, on RabbitMQ, ${queue}) for ${consumer} (on Redis
// the group and the id are one; on Kafka the group is the scenario's
// topic's). Another group is its own id.
func (r *Run) consumerOf(group string) string {
	v := r.cfg.Vars
	if group != "" && (group == v["group"] || group == v["queue"]) && v["consumer"] != "" {
		return r.cfg.Vars["consumer"]
	}
	return group
}

// strikes are the times the database faults armed for s struck, sorted
// (the broker's are counted in the proxy's record: broker.WireMsg's Pass).
func (r *Run) strikes(s *service) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, a := range r.faults {
		if at := a.a.StruckAt(); a.svc == s && !at.IsZero() && a.f.Link != fault.Broker {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// passOf is how many strikes came before t.
func passOf(strikes []time.Time, t time.Time) int {
	n := 0
	for _, s := range strikes {
		if s.Before(t) {
			n++
		}
	}
	return n
}

// Consumers are the consumer ids (groups) the services read as, sorted.
func (w *Wire) Consumers() []string {
	var ids []string
	for _, op := range w.Ops() {
		if op.Kind == history.Delivered && op.Consumer != "" && !slices.Contains(ids, op.Consumer) {
			ids = append(ids, op.Consumer)
		}
	}
	slices.Sort(ids)
	return ids
}

// recordFull marks not judged every invariant that rests on what crossed
// the broker proxies, when a proxy's record was full (fault.MaxRecordBytes):
// a history with events left out could call an event lost that a dropped
// delivery applied, or miss a double publish.
func recordFull(notJudged map[string]string, full []string) map[string]string {
	out := maps.Clone(notJudged)
	if out == nil {
		out = map[string]string{}
	}
	why := fmt.Sprintf("the broker proxy's record reached its %d MB bound and left events out (%s): a service sent more than a drill's history holds", fault.MaxRecordBytes>>20, strings.Join(full, "; "))
	for _, inv := range []string{history.AckedWithoutEffect, history.DoubleApplied, history.DoublePublished, history.Lost, history.Phantom, history.Stranded} {
		out[inv] = why
	}
	return out
}
