package history

import (
	"fmt"
	"time"
)

// On a team's system several relay processes may publish one outbox: two
// replicas, a relay restarted beside one that still runs, a second relay
// service. Each process's publishes come from its own broker proxy, so the
// per-step rule (doublePublished) compares a process with itself only. The
// rule across processes: an event published again by another process is a
// retry the at-least-once contract allows only when something struck
// between the two publishes that could have made the first relay's work
// look unfinished — a fault on either publishing process, either of them
// ending (killed, stopped, exited), an error its producer database
// answered it with, a step that faulted a server while the span lasted. A fault on another service (a consumer's) explains nothing
// a relay did. With nothing between, two relays raced for one outbox row.
// A process that had been handed the event before it published it is a
// consumer forwarding what it read, not a relay: not compared here.

// Proc is the service process an op of a team's wire came from.
type Proc struct {
	N       int    // the run's service start, from 1 (0: an op of a step, not of a process)
	Service string // its service: relay-1
	// Pass is how many broker faults struck its proxy before the op
	// (broker.WireMsg's Pass): the struck request itself is in the pass
	// before the strike.
	Pass int
}

// Disruption is something that struck a team's system while it ran and
// could make a relay publish again: a fault that struck, a process that
// ended, a step that faulted a server.
type Disruption struct {
	At   time.Time
	What string // "the fault broker.reply(XADD) do=kill struck relay-1 (start 2)"
	// Proc and PassAfter place a broker fault on the wire of the process
	// it struck (Proc: its start number; 0 for any other disruption): its
	// time is taken as the struck request goes out, before that request's
	// reply is recorded, so on that process's own wire it is after every
	// op whose Proc.Pass is below PassAfter, the pass it began.
	Proc      int
	PassAfter int
	// Of is the process (its start number) the disruption struck or that
	// ended; 0 for a step's, which may touch every process.
	Of int
	// Until is when a step's disruption ended (a server restart lasts):
	// it counts for a span it overlaps. Zero: an instant.
	Until time.Time
}

// after reports whether d struck after op.
func (d Disruption) after(op Op) bool {
	if d.Proc != 0 && d.Proc == op.Proc.N {
		return op.Proc.Pass < d.PassAfter
	}
	return d.At.After(op.At)
}

// lastsPast reports whether d was still going on after op (a step's
// span), or struck after it.
func (d Disruption) lastsPast(op Op) bool {
	return d.after(op) || d.Until.After(op.At)
}

// concerns reports whether d could have touched a or b: a step's, or one
// on either publishing process.
func (d Disruption) concerns(a, b Op) bool {
	return d.Of == 0 || d.Of == a.Proc.N || d.Of == b.Proc.N
}

// struckOwn reports whether d was a broker fault on op's own publish: the
// pass the strike ended is op's.
func (d Disruption) struckOwn(op Op) bool {
	return d.Proc != 0 && d.Proc == op.Proc.N && op.Proc.Pass == d.PassAfter-1
}

// between is the first disruption that explains b's publishing an event
// a published before: one on either process, or a step's, that struck
// after a and not after b. Or b's own request struck before a published:
// b is recorded at its reply, which the fault held (a delay, a client
// that gave up), so its request went out first and a is the retry.
func (t *Team) between(a, b Op) (Disruption, bool) {
	for _, d := range t.Disruptions {
		if !d.concerns(a, b) {
			continue
		}
		if d.lastsPast(a) && !d.after(b) || d.struckOwn(b) && d.At.Before(a.At) {
			return d, true
		}
	}
	return Disruption{}, false
}

// crossPublished judges a team's publishes across processes: for each
// committed event, two publishes in a row by different processes with no
// disruption between them are a double publish (the first such pair is
// the witness).
func crossPublished(ops []Op, st State) []Violation {
	if st.Team == nil {
		return nil
	}
	byEvent := map[string][]Op{}
	var order []string
	type procEvent struct {
		proc  int
		event string
	}
	handed := map[procEvent]bool{} // a delivery of the event to the process
	for _, op := range ops {
		if op.Kind == Delivered && op.Proc.N != 0 {
			handed[procEvent{op.Proc.N, op.EventID}] = true
		}
		if op.Kind != Publish || op.Republish || op.Proc.N == 0 || handed[procEvent{op.Proc.N, op.EventID}] {
			continue
		}
		if _, committed := st.Outbox[op.EventID]; !committed {
			continue // a forged or foreign event: phantom's to judge
		}
		if len(byEvent[op.EventID]) == 0 {
			order = append(order, op.EventID)
		}
		byEvent[op.EventID] = append(byEvent[op.EventID], op)
	}
	var vs []Violation
	for _, ev := range order {
		pubs := byEvent[ev]
		for i := 1; i < len(pubs); i++ {
			a, b := pubs[i-1], pubs[i]
			if a.Proc.N == b.Proc.N {
				continue // one process: its passes are doublePublished's
			}
			if _, ok := st.Team.between(a, b); ok {
				continue // a retry after a fault: at least once
			}
			vs = append(vs, Violation{DoublePublished, "", ev, fmt.Sprintf("published %d times; %s published it at %s and %s again at %s, and no fault struck either process, neither ended and no step faulted a server between the two: two relays raced for one outbox row",
				len(pubs), procName(a), clock(a.At), procName(b), clock(b.At)), []Op{a, b}})
			break
		}
	}
	return vs
}

func procName(op Op) string { return fmt.Sprintf("%s (start %d)", op.Proc.Service, op.Proc.N) }

// clock is a wire time as the witness shows it.
func clock(t time.Time) string { return t.Format("15:04:05.000000") }
