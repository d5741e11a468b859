package runner

import (
	"cmp"
	"github.com/outboxdrill/runner/proxy/fault"
	"slices"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/sysrun"
)

// wireOf is what the team's processes did on the wire, per process, for
// the report's timeline, from the records the verdict read; nil on the
// reference pipeline.
func wireOf(wire *sysrun.Wire, brokerName string) *report.Wire {
	if wire == nil {
		return nil
	}
	ack := ""
	if k, ok := broker.Lookup(brokerName); ok {
		ack = k.Verbs.Ack
	}
	w := &report.Wire{}
	for _, l := range wire.Lanes() {
		p := report.Process{N: l.Process, Service: l.Service, Start: l.Start.String(), Restart: l.Restart, Fault: l.Fault, Ended: l.Ended}
		if l.Started {
			p.PID = l.PID
		}
		w.Processes = append(w.Processes, p)
		w.Ops = append(w.Ops, laneOps(l, ack)...)
	}
	slices.SortStableFunc(w.Ops, func(a, b report.WireOp) int { return a.At.Compare(b.At) })
	return w
}

// laneOps are one process's crossings as wire operations, each with the
// messages it carried: a publish and a delivery are the wire messages
// recorded at the same instant (a proxy times both from one record); an
// ack carries the acked deliveries before it that no earlier ack took.
func laneOps(l sysrun.Lane, ackVerb string) []report.WireOp {
	pubs, dels := byInstant(l.Wire.Publishes), byInstant(l.Wire.Deliveries)
	var unacked []report.WireEvent // acked deliveries waiting for their ack's crossing
	var out []report.WireOp
	for _, c := range l.Crossings {
		op := report.WireOp{At: c.At, Process: l.Process, Link: c.Link.String(), Op: c.Op, Tables: c.Tables, Reply: c.Reply, Fault: c.Fault}
		switch {
		case c.Link != fault.Broker:
			op.Op = cmp.Or(c.Command, "statement")
			if c.Boundary == fault.Commit {
				op.Op, op.Class, op.Unlearnt = "COMMIT", report.ClassCommit, c.Unattributed
			}
		case len(pubs[c.At]) > 0:
			op.Class, op.Events = report.ClassPublish, events(pubs[c.At])
		case len(dels[c.At]) > 0:
			op.Class, op.Events = report.ClassDeliver, events(dels[c.At])
			for _, d := range dels[c.At] {
				if d.Acked {
					unacked = append(unacked, events([]broker.WireMsg{d})...)
				}
			}
		case c.Op == fault.OpAck || c.Op == ackVerb:
			op.Class, op.Events, unacked = report.ClassAck, unacked, nil
		}
		out = append(out, op)
	}
	return out
}

// byInstant groups wire messages by the time their record was taken.
func byInstant(ms []broker.WireMsg) map[time.Time][]broker.WireMsg {
	out := map[time.Time][]broker.WireMsg{}
	for _, m := range ms {
		out[m.At] = append(out[m.At], m)
	}
	return out
}

func events(ms []broker.WireMsg) []report.WireEvent {
	out := make([]report.WireEvent, len(ms))
	for i, m := range ms {
		out[i] = report.WireEvent{EventID: m.EventID, EntryID: m.EntryID, Group: m.Group, Dest: m.Dest}
	}
	return out
}
