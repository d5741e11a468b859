package explore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
)

// Pairs are depth 2's points: for each point that held, a second fault at
// each point of its recovery, as its run recorded it — on the process the
// supervisor restarted when the first fault's process ended (then:), else
// on the same process after the strike (also:). The recovery's crossings
// are reduced as the first run's are (Enumerate), and a pair is a
// duplicate of another whose first fault struck the same kind of crossing
// with the same action and whose second is the same. pruned are the pairs
// left out, each saying why (Point.Pruned), among them those whose second
// fault would meet nothing the first left to recover from (recovery).
func Pairs(w *Workload, firsts []*Point, runs map[*Point][]fault.Crossing, actions []string, nthCap int) (pairs, pruned []*Point) {
	seen := map[string]string{}
	for _, p := range firsts {
		if p.Outcome != Held || p.Second != nil {
			continue
		}
		for _, second := range recovery(w, p, runs[p], actions, nthCap) {
			pair := &Point{Service: p.Service, Step: p.Step, On: p.On, Nth: p.Nth, Do: p.Do, Crossing: p.Crossing,
				Second: &Fault{Step: p.Step, On: second.On, Nth: second.Nth, Do: second.Do, Where: second.Where}, Pruned: second.Pruned}
			key := strings.Join([]string{p.Service, p.Crossing, p.Do, second.Where, second.Crossing, second.On.On(), fmt.Sprint(second.Nth), second.Do}, "|")
			if first, dup := seen[key]; dup && pair.Pruned == "" {
				pair.Pruned = "duplicate of " + first + " (same first boundary and action, same second)"
			}
			if pair.Pruned != "" {
				pruned = append(pruned, pair)
				continue
			}
			seen[key] = pair.String()
			pairs = append(pairs, pair)
		}
	}
	return pairs, pruned
}

// candidate is a second fault with the kind of crossing it strikes.
type candidate struct {
	Fault
	Crossing, Pruned string
}

// recovery lists the candidates for p's second fault in its run xs. A
// candidate is pruned, saying why, where its fault would meet nothing the
// first fault left to recover from: on the process the first fault
// killed, when its restart crossed nothing (no crossing of it comes after
// the strike), and on a restart that takes a depth-1 point's path again
// (fresh).
func recovery(w *Workload, p *Point, xs []fault.Crossing, actions []string, nthCap int) []candidate {
	var own, restarted []fault.Crossing
	for _, c := range xs {
		switch {
		case c.Start != w.StartPos(p.Step):
		case c.Restart == 0:
			own = append(own, c)
		case c.Restart == 1:
			restarted = append(restarted, c)
		}
	}
	struck := slices.IndexFunc(own, func(c fault.Crossing) bool { return c.Fault != "" })
	if struck < 0 {
		return nil // held without striking: nothing recovered from
	}
	where, proc, from := "also", own, struck+1
	why := func(string) string { return "" }
	switch {
	case len(restarted) > 0:
		where, proc, from = "then", restarted, 0
		if fresh(p, own[:struck+1]) {
			why = func(point string) string {
				return "a depth-1 point again: " + point + " (the first fault struck before its process had done anything but set up: its restart takes that point's path)"
			}
		}
	case p.Do == "kill":
		why = func(string) string {
			return "after its process ended (the first fault killed it, and its restart crossed nothing before the run ended)"
		}
	}
	e := newEnumerator(w, p.Step, actions, nthCap)
	var out []candidate
	for i, c := range proc {
		pts := e.points(c)
		if i < from {
			continue
		}
		for _, pt := range pts {
			nth := pt.Nth
			if where == "also" && pt.On.Meets(own[struck]) && sameMoment(p.On, pt.On) {
				// The first fault's trigger took that crossing: the
				// second never counted it.
				nth--
			}
			cd := candidate{Fault: Fault{On: pt.On, Nth: nth, Do: pt.Do, Where: where}, Crossing: pt.Crossing, Pruned: pt.Pruned}
			if cd.Pruned == "" {
				cd.Pruned = why(fmt.Sprintf("%s %s nth=%d do=%s", p.Service, pt.On.On(), nth, pt.Do))
			}
			out = append(out, cd)
		}
	}
	return out
}

// fresh reports whether the first fault, p, killed its process before it
// had done anything: every crossing before the strike got no point (a
// connection's setup, an idle poll, a transaction that wrote nothing) and
// the strike kept the command from the broker (request(OP)). Its restart
// then meets what the process met at its start, and a second fault there
// is the depth-1 point of the same trigger and nth.
func fresh(p *Point, upToStrike []fault.Crossing) bool {
	if p.Do != "kill" || p.On.Link != fault.Broker || p.On.Boundary != fault.Request {
		return false
	}
	for _, c := range upToStrike[:len(upToStrike)-1] {
		if skipOf(c) == "" && !idle(c) {
			return false
		}
	}
	return true
}

// sameMoment reports whether two triggers count a crossing at the same
// moment: a delivery's reply(deliver) counts the server's answer, every
// other trigger the client's request (a reply(OP) holds the answer to a
// request it counted). The proxy gives a crossing to the first waiting
// trigger that strikes there, so a second fault counts the first one's
// crossing only at the other moment: before the strike (the request, for
// a strike at the answer) or after it (the answer the strike let through,
// which Meets reads from the recorded run).
func sameMoment(a, b fault.Trigger) bool { return atAnswer(a) == atAnswer(b) }

func atAnswer(t fault.Trigger) bool {
	return t.Link == fault.Broker && t.Boundary == fault.Reply && t.Filter.Command == fault.OpDeliver
}
