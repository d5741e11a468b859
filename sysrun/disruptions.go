package sysrun

import (
	"fmt"
	"slices"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Disruptions are what struck the run's services so far, in time order,
// each on the process it struck (Of): every fault that struck (on any
// service, at any link) and every process that ended (killed or stopped by a step, killed by a fault, exited by
// itself). After one, a relay process publishing an event another
// published before is a retry (history's crossPublished).
func (r *Run) Disruptions() []history.Disruption {
	r.mu.Lock()
	faults, insts := slices.Clone(r.faults), slices.Clone(r.insts)
	r.mu.Unlock()
	out := r.strikeDisruptions(faults)
	for _, in := range insts {
		in.mu.Lock()
		how, at, proc, start := in.ended, in.endedAt, in.proc, in.start
		in.mu.Unlock()
		if at.IsZero() && proc != nil {
			at, how = proc.ExitedAt(), "exited by itself"
		}
		if at.IsZero() {
			continue // still running
		}
		out = append(out, history.Disruption{At: at, What: fmt.Sprintf("%s (start %d) ended: %s", in.service, start, how), Of: start})
	}
	out = append(out, r.errorDisruptions()...)
	slices.SortStableFunc(out, func(a, b history.Disruption) int { return a.At.Compare(b.At) })
	return out
}

// errorDisruptions are the errors a service's producer database answered
// it with, no fault injected (a serialization failure, a lock or
// statement timeout): a relay whose mark failed so leaves its row for
// another to publish again. Past the times the proxy keeps, the rest of
// the run counts as disrupted.
func (r *Run) errorDisruptions() []history.Disruption {
	r.mu.Lock()
	logs := slices.Clone(r.logs)
	r.mu.Unlock()
	var out []history.Disruption
	for _, l := range logs {
		p := l.svc.pg[0]
		if p == nil {
			continue
		}
		times, more := p.ErrorTimes()
		for _, at := range times {
			out = append(out, history.Disruption{At: at, Of: l.start, What: fmt.Sprintf("the producer database answered %s (start %d) with an error", l.service, l.start)})
		}
		if more && len(times) > 0 {
			out = append(out, history.Disruption{At: times[len(times)-1], Until: time.Now(), Of: l.start,
				What: fmt.Sprintf("the producer database answered %s (start %d) with more errors than their times kept", l.service, l.start)})
		}
	}
	return out
}

// strikeDisruptions are the faults that struck. A broker fault is placed
// on its own process's wire by the pass it began: each strike ends a pass
// of that proxy's record, a duplicate's copy one more
// (broker.PassesWithCopies).
func (r *Run) strikeDisruptions(faults []*armed) []history.Disruption {
	var out []history.Disruption
	passes := map[*service]int{}
	slices.SortStableFunc(faults, func(a, b *armed) int { return a.a.StruckAt().Compare(b.a.StruckAt()) })
	for _, a := range faults {
		at := a.a.StruckAt()
		if at.IsZero() {
			continue
		}
		start := 0
		if a.svc.inst != nil {
			start = a.svc.inst.start
		}
		d := history.Disruption{At: at, What: fmt.Sprintf("the fault %s struck %s (start %d)", a.f, a.service, start), Of: start}
		if a.f.Link == fault.Broker {
			passes[a.svc]++
			d.Proc, d.PassAfter = start, passes[a.svc]
			if a.f.Action.Do == fault.Duplicate {
				passes[a.svc]++ // its copy is a pass of its own
			}
		}
		out = append(out, d)
	}
	return out
}
