package sysrun

import (
	"github.com/outboxdrill/runner/proxy/fault"
	"slices"

	"github.com/outboxdrill/runner/broker"
)

// Lane is one service process as a report's timeline draws it: a lane of
// its own (each start its own, the supervisor's restarts too), with how it
// ended and everything its proxies relayed.
type Lane struct {
	// Output says which start step started it, the fault armed with it,
	// its pid and how it ended; its Text is left out (Outputs has it).
	Output
	// Process is the run's Nth process (Crossing.Process); Restart the
	// supervisor's restart it is, 0 for a start step's own.
	Process, Restart int
	// Started: the process ran (a start whose process never ran has a
	// lane with no pid).
	Started   bool
	Crossings []fault.Crossing // what crossed its proxies, in the proxies' order
	Wire      broker.Wire      // what its broker proxy carried; zero without one
}

// Lanes are every process of the run so far, in start order, each with
// what crossed its proxies: the history's wire, per process, for a report
// to draw (the history itself is Ops).
func (w *Wire) Lanes() []Lane {
	r := w.r
	r.mu.Lock()
	obs, insts := slices.Clone(r.observed), slices.Clone(r.insts)
	r.mu.Unlock()
	// Outputs follows r.insts, which only grows: zip the two over what
	// both hold.
	outs := map[*instance]Output{}
	for i, o := range r.Outputs() {
		if i < len(insts) {
			o.Text = ""
			outs[insts[i]] = o
		}
	}
	crossings := r.Crossings()
	out := make([]Lane, 0, len(obs))
	for _, o := range obs {
		l := Lane{Process: o.process, Restart: o.restart}
		l.Output, l.Started = outs[o.svc.inst]
		if !l.Started {
			l.Output = Output{Service: o.svc.name, Start: o.svc.inst.at, Ended: "never ran"}
			if f := o.svc.inst.fault; f != nil {
				l.Fault = faultText(*f)
			}
		}
		for _, c := range crossings {
			if c.Process == o.process {
				l.Crossings = append(l.Crossings, c)
			}
		}
		for i, b := range w.logs { // decoded once, with the history
			if b.svc == o.svc {
				l.Wire = w.wires[i]
			}
		}
		out = append(out, l)
	}
	return out
}
