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
// look unfinished — a fault on any service, a process that ended (killed,
// stopped, exited), a step that faulted a server. With nothing between,
// two relays raced for one outbox row.

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
}

// after reports whether d struck after op.
func (d Disruption) after(op Op) bool {
	if d.Proc != 0 && d.Proc == op.Proc.N {
		return op.Proc.Pass < d.PassAfter
	}
	return d.At.After(op.At)
}

// between is the first disruption after a and not after b.
func (t *Team) between(a, b Op) (Disruption, bool) {
	for _, d := range t.Disruptions {
		if d.after(a) && !d.after(b) {
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
	for _, op := range ops {
		if op.Kind != Publish || op.Republish || op.Proc.N == 0 {
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
			vs = append(vs, Violation{DoublePublished, "", ev, fmt.Sprintf("published %d times; %s published it at %s and %s again at %s, and no fault struck, no process ended and no step faulted a server between the two: two relays raced for one outbox row",
				len(pubs), procName(a), clock(a.At), procName(b), clock(b.At)), []Op{a, b}})
			break
		}
	}
	return vs
}

func procName(op Op) string { return fmt.Sprintf("%s (start %d)", op.Proc.Service, op.Proc.N) }

// clock is a wire time as the witness shows it.
func clock(t time.Time) string { return t.Format("15:04:05.000000") }
