package explore

import (
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// startProgress starts the progress of total units (points, events),
// when the exploration reports any; stopProgress ends it.
func (e *explorer) startProgress(noun string, total int) {
	if e.p.ProgressOut == nil {
		return
	}
	c := e.p.Progress
	c.Noun, c.Bad = noun, "violation(s)"
	prog := progress.New(e.p.ProgressOut, c)
	prog.Add(total)
	e.mu.Lock()
	e.prog = prog
	e.mu.Unlock()
}

func (e *explorer) stopProgress() {
	e.mu.Lock()
	prog := e.prog
	e.prog = nil
	e.mu.Unlock()
	prog.Close()
}

// count counts a point's run, judged res, in the progress (e.mu held): a
// violation as the point's verdict will say it.
func (e *explorer) count(r *record, res *report.Result) {
	if !r.counted || e.p.Random != nil { // the random run counts its events
		return
	}
	bad := 0
	if classify(res).afterPipelinedError(r.faults).Outcome == Violated {
		bad = 1
	}
	e.prog.Done(1, bad)
}

// stepDone counts the random run's events as their produce steps end
// (each is one event, committed or not: a fault may strike it).
func (e *explorer) stepDone(sc *scenario.Scenario, call *steps.Call, _ steps.Result) {
	if e.p.Random == nil || call.Def.Name != "produce" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.records[sc]; r != nil && r.counted {
		e.prog.Done(1, 0)
	}
}
