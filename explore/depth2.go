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
// with the same action and whose second is the same. pruned counts the
// pairs left out.
func Pairs(w *Workload, firsts []*Point, runs map[*Point][]fault.Crossing, actions []string, nthCap int) (pairs []*Point, pruned int) {
	seen := map[string]bool{}
	for _, p := range firsts {
		if p.Outcome != Held || p.Second != nil {
			continue
		}
		for _, second := range recovery(w, p, runs[p], actions, nthCap) {
			key := strings.Join([]string{p.Service, p.Crossing, p.Do, second.Where, second.Crossing, second.On.On(), fmt.Sprint(second.Nth), second.Do}, "|")
			if second.Pruned != "" || seen[key] {
				pruned++
				continue
			}
			seen[key] = true
			pairs = append(pairs, &Point{Service: p.Service, Step: p.Step, On: p.On, Nth: p.Nth, Do: p.Do, Crossing: p.Crossing,
				Second: &Fault{Step: p.Step, On: second.On, Nth: second.Nth, Do: second.Do, Where: second.Where}})
		}
	}
	return pairs, pruned
}

// candidate is a second fault with the kind of crossing it strikes.
type candidate struct {
	Fault
	Crossing, Pruned string
}

// recovery lists the candidates for p's second fault in its run xs.
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
	if len(restarted) > 0 {
		where, proc, from = "then", restarted, 0
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
			if where == "also" && pt.On.Meets(own[struck]) {
				// The first fault's trigger took that crossing: the
				// second never counted it.
				nth--
			}
			out = append(out, candidate{Fault: Fault{On: pt.On, Nth: nth, Do: pt.Do, Where: where}, Crossing: pt.Crossing, Pruned: pt.Pruned})
		}
	}
	return out
}
