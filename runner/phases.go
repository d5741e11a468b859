package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// runScenario runs one job through its phases, in order:
//
//	gate     decide, before anything is made, whether the job runs at all
//	acquire  its databases, broker objects and (a team's) processes
//	steps    the scenario's steps, until one fails or skips
//	settle   a team's system running on until it settled
//	judge    the history, from the settled state
//	recycle  keep or remove what acquire made
//
// Each phase is a method of scenarioRun, which carries what the earlier
// ones found.
func runScenario(ctx context.Context, p *Params, w *World, j job) (*report.Result, error) {
	if err := w.brokerUp(ctx, j.broker); err != nil {
		return nil, err
	}
	r := &scenarioRun{p: p, w: w, j: j, start: time.Now(), run: ctx}
	if skip := r.gate(); skip != "" {
		res := r.newResult()
		res.Skipped = skip
		return res, nil
	}
	res, err := r.acquire(ctx)
	if res == nil || err != nil || r.iso == nil {
		return res, err
	}
	// The timeout bounds the scenario's own steps, not the isolation around
	// them. r.run is the run's context: its interrupt (not the timeout) is
	// what may cut a scenario off before its verdict.
	ctx, cancel := context.WithTimeoutCause(ctx, p.Timeout, fmt.Errorf("scenario timed out after %s", p.Timeout))
	defer cancel()
	if err := r.prepare(ctx); err != nil {
		return nil, err
	}
	r.steps(ctx)
	r.settle(ctx)
	restoreErr := r.judge(ctx)
	return r.res, errors.Join(restoreErr, r.recycle(ctx))
}

// scenarioRun is one job between its phases.
type scenarioRun struct {
	p     *Params
	w     *World
	j     job
	start time.Time
	run   context.Context // the run's: its interrupt may cut the scenario off

	iso    *isolation
	sys    *sysrun.Run // a team's system; nil on the reference pipeline
	env    *steps.Env
	judged func(*report.Result) // Params.SystemRun's, told the verdict
	res    *report.Result

	decided, cutOff bool     // a step failed (cutOff: after an interrupt)
	calm            *settled // how the team's system settled
}

// newResult is the job's result before any phase filled it in.
func (r *scenarioRun) newResult() *report.Result {
	return &report.Result{Scenario: r.j.sc, Broker: r.j.broker, Label: r.w.Labels()[r.j.broker],
		Matrix: r.p.matrix(r.j.broker)}
}

// gate is the skip reason of a job that must not start on its broker, or
// "": decided from the scenario and the broker's kind alone.
func (r *scenarioRun) gate() string {
	sc, b := r.j.sc, r.j.broker
	if sc.System != nil {
		// Never run: the services would get a URL scheme they cannot parse.
		if why := sc.System.Unsupported(b); why != "" {
			return fmt.Sprintf("%s: %s", sc.SystemPos, why)
		}
	}
	if why := sc.PinnedSkip(b); why != "" {
		return why
	}
	// Never sent to a broker that cannot name it (on RabbitMQ a refused
	// queue name closes the run's shared connection).
	if at, why := consumerIDSkip(sc, b); why != "" {
		return fmt.Sprintf("%s: %s", at, why)
	}
	return ""
}

// acquire makes the job's isolation (and starts a team's system). A broker
// that could not set up the scenario's objects fails the scenario alone
// (a result, r.iso nil); any other error is the run's.
func (r *scenarioRun) acquire(ctx context.Context) (*report.Result, error) {
	sc, b := r.j.sc, r.j.broker
	var err error
	if sc.System != nil {
		r.iso, r.sys, err = r.w.acquireSystem(ctx, b, sc)
		if err == nil && r.p.SystemRun != nil {
			r.judged = r.p.SystemRun(sc, r.sys)
		}
	} else {
		r.iso, err = r.w.acquire(ctx, b, sc)
	}
	var be *brokerError
	if errors.As(err, &be) {
		res := r.newResult()
		res.Duration = time.Since(r.start)
		res.Failures = []steps.Failure{{Pos: sc.Pos, Key: "broker", Msg: "cannot set up the scenario's broker: " + be.Error()}}
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	r.env = r.iso.env
	r.res = r.newResult()
	r.res.Setup, r.res.Where = time.Since(r.start), [3]string{r.iso.producer, r.iso.consumer, r.iso.streamKey}
	return r.res, nil
}

// prepare decides the skips that need the acquired broker objects (what
// the scenario's broker options can do) and opens a CDC relay's slot.
func (r *scenarioRun) prepare(ctx context.Context) error {
	sc, res := r.j.sc, r.res
	res.Caps = r.env.Broker.Capabilities()
	// A scenario is never passed on a broker that cannot do what it asks.
	if why := lacking(sc, r.j.broker, res.Caps); why != "" {
		res.Skipped = fmt.Sprintf("%s: %s", sc.Pos, why)
	}
	if res.Skipped != "" || !usesCDC(sc) {
		return nil
	}
	skip, err := openSlot(ctx, r.env, r.iso.producer)
	if err != nil {
		return fmt.Errorf("%s: %w", sc.File, err)
	}
	if skip != "" {
		at, _ := cdcStep(sc)
		res.Skipped = fmt.Sprintf("%s: %s", at, skip)
	}
	return nil
}

// steps runs the scenario's steps until one fails or skips.
func (r *scenarioRun) steps(ctx context.Context) {
	res := r.res
	for _, call := range r.j.sc.Steps {
		if res.Skipped != "" {
			return
		}
		stepStart := time.Now()
		out, fails := call.Exec(ctx, r.env)
		res.Steps = append(res.Steps, report.StepRecord{Call: call, Result: out, Failures: fails, At: stepStart, Duration: time.Since(stepStart)})
		if out.Skipped != "" {
			res.Skipped = fmt.Sprintf("%s: %s", call.Pos, out.Skipped)
			return
		}
		for _, a := range out.Alerts {
			res.Alerts = append(res.Alerts, fmt.Sprintf("%s: %s", call.Pos, a))
		}
		res.NA = append(res.NA, out.NA...)
		if len(fails) > 0 {
			res.Failures = fails
			// A step that failed before an interrupt failed: its verdict
			// stands, whatever settling and judging meet after.
			r.decided, r.cutOff = true, r.run.Err() != nil
			return
		}
	}
}

// settle lets a team's system run on after the last step until it
// settled (a fault may still strike meanwhile), then stops it.
func (r *scenarioRun) settle(ctx context.Context) {
	if r.sys != nil && r.res.Skipped == "" {
		r.res.SettleStart = time.Now()
		r.calm = settleSystem(ctx, r.env, r.sys, r.res, cmp.Or(r.j.sc.Settle, r.p.Settle, DefaultSettle))
		r.res.SettleEnd = time.Now()
	}
	finishSystem(r.sys, r.res)
	if r.res.Skipped == "" && r.res.Passed() {
		r.res.Skipped = allNA(r.res)
	}
}

// judge brings back servers a process fault left down, then judges the
// history on that recovered state. Its error is the restore's.
func (r *scenarioRun) judge(ctx context.Context) error {
	sc, res, sys := r.j.sc, r.res, r.sys
	var restoreErr error
	if sc.Exclusive || sc.BrokerExclusive {
		if err := r.w.restore(context.WithoutCancel(ctx), r.iso, r.j.broker, sc.BrokerExclusive, sc.Exclusive); err != nil {
			restoreErr = fmt.Errorf("restart the servers after %s: %w", sc.File, err)
		}
	}
	var err error
	switch {
	case sys != nil && res.Skipped == "" && restoreErr == nil && !fieldsMismatch(res):
		// A team's system is judged even when a check failed: the
		// violation names what the check only shows.
		err = judgeSystem(ctx, r.env, sys, res, r.calm)
	case sys != nil && fieldsMismatch(res):
		res.NotJudged = notJudged("the broker entries lack the system file's stream fields, so the history cannot name their events")
	case res.Skipped == "" && res.Passed() && restoreErr == nil:
		err = judgeHistory(ctx, r.env, res)
	}
	if err != nil {
		res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: "history", Msg: err.Error()})
	}
	if !r.decided {
		r.cutOff = r.run.Err() != nil
	}
	res.CutOff = r.cutOff
	// What the team's services said, up to the verdict.
	res.Services = servicesSaid(sys)
	res.Wire = wireOf(sys, r.j.broker)
	if r.judged != nil {
		r.judged(res)
	}
	if r.p.judged != nil {
		r.p.judged(res)
	}
	return restoreErr
}

// recycle drops a CDC slot, then keeps (--keep) or removes the job's
// isolation. The result stands whatever fails here; the run reports it.
func (r *scenarioRun) recycle(ctx context.Context) error {
	var err error
	if r.env.CDC != nil { // a slot left behind would hold back WAL for good, kept or not
		err = r.env.CDC.Drop(context.WithoutCancel(ctx))
		r.env.CDC = nil
	}
	keep := r.p.Keep == KeepAll || r.p.Keep == KeepFailed && !r.res.Passed()
	if keep {
		r.res.Kept = r.w.inspect(r.iso, r.j.broker, r.j.sc.Consumers()...)
	}
	var rerr error
	if r.p.discard && !keep {
		rerr = r.w.discard(ctx, r.iso)
	} else {
		rerr = r.w.recycle(ctx, r.iso, keep)
	}
	r.res.Duration = time.Since(r.start)
	if rerr != nil {
		rerr = fmt.Errorf("cleanup of %s: %w", r.j.sc.File, rerr)
	}
	return errors.Join(err, rerr)
}
