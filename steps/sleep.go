package steps

import (
	"context"
	"fmt"
	"time"
)

// SleepParams are the parameters of the sleep step.
type SleepParams struct {
	For time.Duration `param:"for" required:"yes" primary:"yes" doc:"how long (0: not at all); time passes for real (idle times grow, within: waits)"`
}

func (p *SleepParams) Validate() error {
	// 0 is a duration like any (a matrix's sleep(${d}) with d: 0): no wait.
	if p.For < 0 {
		return fmt.Errorf("sleep needs a duration of 0 or more, e.g. sleep(500ms)")
	}
	return nil
}

func sleepDefs() []*Def {
	return []*Def{
		Define("sleep", "Let real time pass: pending entries grow idle, a worker that stopped looks dead. Cancelled by the scenario timeout.",
			nil, runSleep),
	}
}

func runSleep(ctx context.Context, _ *Env, p *SleepParams) (Result, error) {
	t := time.NewTimer(p.For)
	defer t.Stop()
	select {
	case <-t.C:
		return Result{Details: []string{"slept " + p.For.String()}}, nil
	case <-ctx.Done():
		return Result{}, context.Cause(ctx)
	}
}

func (*SleepParams) FaultSite() Participant { return ConsumerDB }

func (p *SleepParams) Draw(d Diagram, _ Result) {
	d.Note(fmt.Sprintf("sleep(for=%s)", p.For), ProducerDB, ConsumerDB)
}
