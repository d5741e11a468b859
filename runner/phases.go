package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/judge"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/world"
)

// runScenario runs one job through its phases, in order:
//
//	gate     decide, before anything is made, whether the job runs at all
//	acquire  its databases, broker objects and (a team's) processes
//	steps    the scenario's steps, until one fails
//	settle   a team's system running on until it settled (judge.Settle)
//	judge    the history, from the settled state (package judge)
//	recycle  keep or remove what acquire made
//
// Each phase is a method of scenarioRun, which carries what the earlier
// ones found. The world (package world) holds the servers the jobs share.
func runScenario(ctx context.Context, p *Params, w *world.World, j job) (*report.Result, error) {
	if err := w.BrokerUp(ctx, j.broker); err != nil {
		return nil, err
	}
	r := &scenarioRun{p: p, w: w, j: j, start: time.Now(), run: ctx}
	if skip := r.gate(); skip != "" {
		res := r.newResult()
		res.Skipped, res.Caps, res.NA = skip, r.caps, r.na
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
	w     *world.World
	j     job
	start time.Time
	run   context.Context // the run's: its interrupt may cut the scenario off

	caps broker.Capabilities // the gate's: what the broker can do for the scenario
	na   []steps.NA          // the gate's: every check n/a

	iso    *world.Isolation
	sys    *sysrun.Run // a team's system; nil on the reference pipeline
	env    *steps.Env
	judged func(*report.Result) // Params.SystemRun's, told the verdict
	res    *report.Result

	decided, cutOff bool           // a step failed (cutOff: after an interrupt)
	calm            *judge.Settled // how the team's system settled
	wire            *sysrun.Wire   // what its broker proxies relayed, once it settled
}

// newResult is the job's result before any phase filled it in.
func (r *scenarioRun) newResult() *report.Result {
	return &report.Result{Scenario: r.j.sc, Broker: r.j.broker, Label: r.w.Labels()[r.j.broker],
		Matrix: r.p.matrix(r.j.broker)}
}

// acquire makes the job's isolation (and starts a team's system). A broker
// that could not set up the scenario's objects fails the scenario alone
// (a result, r.iso nil); any other error is the run's.
func (r *scenarioRun) acquire(ctx context.Context) (*report.Result, error) {
	sc, b := r.j.sc, r.j.broker
	var err error
	if sc.System != nil {
		r.iso, r.sys, err = r.w.AcquireSystem(ctx, b, sc)
		if err == nil && r.p.SystemRun != nil {
			r.judged = r.p.SystemRun(sc, r.sys)
		}
	} else {
		r.iso, err = r.w.Acquire(ctx, b, sc)
	}
	var be *world.BrokerError
	if errors.As(err, &be) {
		res := r.newResult()
		res.Duration = time.Since(r.start)
		res.Failures = []steps.Failure{{Pos: sc.Pos, Key: "broker", Msg: "cannot set up the scenario's broker: " + be.Error()}}
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	r.env = r.iso.Env
	r.res = r.newResult()
	r.res.Setup, r.res.Where = time.Since(r.start), [3]string{r.iso.Producer, r.iso.Consumer, r.iso.StreamKey}
	r.res.Caps = r.caps
	return r.res, nil
}

// prepare opens a CDC relay's slot, which the gate saw the server can give.
func (r *scenarioRun) prepare(ctx context.Context) error {
	if !usesCDC(r.j.sc) {
		return nil
	}
	if err := r.iso.OpenSlot(ctx); err != nil {
		return fmt.Errorf("%s: %w", r.j.sc.File, err)
	}
	return nil
}

// steps runs the scenario's steps until one fails. No step skips: every
// skip a step could meet is known before the scenario starts (gate); a
// step's SkipError, should one come, still ends the scenario skipped.
func (r *scenarioRun) steps(ctx context.Context) {
	res := r.res
	for _, call := range r.j.sc.Steps {
		if res.Skipped != "" {
			return
		}
		stepStart := time.Now()
		out, fails := call.Exec(ctx, r.env)
		res.Steps = append(res.Steps, report.StepRecord{Call: call, Result: out, Failures: fails, At: stepStart, Duration: time.Since(stepStart)})
		if r.p.StepDone != nil {
			r.p.StepDone(r.j.sc, call, out)
		}
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
// settled (a fault may still strike meanwhile), then judges its faults and
// reads what its broker proxies relayed, once, for the verdict.
func (r *scenarioRun) settle(ctx context.Context) {
	if r.sys != nil && r.res.Skipped == "" {
		r.res.SettleStart = time.Now()
		r.calm = judge.Settle(ctx, r.env, r.sys, r.res, cmp.Or(r.j.sc.Settle, r.p.Settle, DefaultSettle))
		r.res.SettleEnd = time.Now()
	}
	r.wire = judge.Finish(r.sys, r.res)
}

// judge brings back servers a process fault left down, then judges the
// history on that recovered state. Its error is the restore's.
func (r *scenarioRun) judge(ctx context.Context) error {
	sc, res, sys := r.j.sc, r.res, r.sys
	var restoreErr error
	if sc.Exclusive || sc.BrokerExclusive {
		if err := r.w.Restore(context.WithoutCancel(ctx), r.iso, r.j.broker, sc.BrokerExclusive, sc.Exclusive); err != nil {
			restoreErr = fmt.Errorf("restart the servers after %s: %w", sc.File, err)
		}
	}
	var err error
	switch {
	case sys != nil && res.Skipped == "" && restoreErr == nil && !judge.FieldsMismatch(res):
		// A team's system is judged even when a check failed: the
		// violation names what the check only shows.
		err = judge.System(ctx, r.env, sys, r.wire, res, r.calm)
	case sys != nil && judge.FieldsMismatch(res):
		res.NotJudged = judge.NotJudged("the broker entries lack the system file's stream fields, so the history cannot name their events")
	case res.Skipped == "" && res.Passed() && restoreErr == nil:
		err = judge.History(ctx, r.env, res)
	}
	if err != nil {
		res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: "history", Msg: err.Error()})
	}
	if !r.decided {
		r.cutOff = r.run.Err() != nil
	}
	res.CutOff = r.cutOff
	// What the team's services said, up to the verdict.
	res.Services = judge.ServicesSaid(sys)
	res.Wire = wireOf(r.wire, r.j.broker)
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
		r.res.Kept = r.w.Inspect(r.iso, r.j.broker, r.j.sc.Consumers()...)
	}
	var rerr error
	if r.p.discard && !keep {
		rerr = r.w.Discard(ctx, r.iso)
	} else {
		rerr = r.w.Recycle(ctx, r.iso, keep)
	}
	r.res.Duration = time.Since(r.start)
	if rerr != nil {
		rerr = fmt.Errorf("cleanup of %s: %w", r.j.sc.File, rerr)
	}
	return errors.Join(err, rerr)
}
