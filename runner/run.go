package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// Params configures a run. The zero value starts managed servers, runs every
// scenario given and prints one block per scenario to Out.
type Params struct {
	// PGURL is an existing PostgreSQL server's admin URL; the runner creates
	// and drops its own databases there. Empty: start a throwaway server.
	PGURL string
	// Brokers are the brokers every scenario runs on, each its own result
	// (default: redis).
	Brokers []string
	// BrokerGiven: Brokers were named (--broker). Without it a scenario
	// pinned to a broker (broker: key) runs on that broker alone, so that
	// `runner run FILE` reproduces what the file was written on; with it,
	// a pinned scenario is skipped on the brokers not its own.
	BrokerGiven bool
	// URLs name existing broker servers by broker name (--redis, --nats,
	// …: each kind's flag); the runner uses and deletes its own streams,
	// topics and queues there. Without one the runner starts its own
	// server (for Kafka: franz-go's kfake, labelled "kafka (kfake)" in
	// every report).
	URLs map[string]string
	// ConnectTimeout bounds how long a server given by URL may take to
	// answer (default DefaultConnectTimeout); a wrong one is named at once.
	ConnectTimeout time.Duration
	// Run selects scenarios whose name matches.
	Run *regexp.Regexp
	// Timeout bounds one scenario (default 1m); a hung step is cancelled.
	Timeout time.Duration
	// Settle bounds how long a team's system may take to settle after the
	// last step before it is judged (default DefaultSettle); a scenario's
	// settle: key overrides it.
	Settle time.Duration
	// Verbose prints every scenario's step trace, not only failing ones.
	Verbose bool
	// Parallel is how many scenarios run at once (at least 1).
	Parallel int
	// FailFast starts no new scenario after one failed.
	FailFast bool
	// Tags keeps scenarios with at least one of these tags; SkipTags drops
	// scenarios with any of these.
	Tags, SkipTags []string
	// Shard, when Shard.Of > 0, keeps the Index-th of Of deterministic shards.
	Shard Shard
	// Keep leaves the databases and stream of some scenarios in place and
	// prints how to inspect them (external servers only).
	Keep Keep
	// Progress draws a live progress line on Out (a terminal, not CI).
	Progress bool
	// SystemRun, when set, is told of each team system's run before its
	// first step (runner explore turns on sysrun's Observe there); the
	// function it returns, if not nil, gets the scenario's result once it
	// is judged, while the run's record is still whole.
	SystemRun func(sc *scenario.Scenario, run *sysrun.Run) func(*report.Result)
	// Out receives the console report; Log, if set, progress messages;
	// Warn, if set, what the user must see even without Log (parallelism
	// capped by the PostgreSQL connection budget).
	Out, Log, Warn io.Writer
}

// brokers are the brokers every scenario runs on: p.Brokers, else the
// default broker (Redis).
func (p *Params) brokers() []string {
	if len(p.Brokers) == 0 {
		return []string{broker.Default()}
	}
	return p.Brokers
}

// matrix: a result on broker b is one of a matrix (reports name its
// broker) when the run has several brokers or b is not the default.
func (p *Params) matrix(b string) bool { return len(p.brokers()) > 1 || b != broker.Default() }

// brokersOf are the brokers scenario sc runs on: its pinned broker when
// the run named none, else the run's (pinned elsewhere: skipped there).
func (p *Params) brokersOf(sc *scenario.Scenario) []string {
	if sc.Pinned != "" && !p.BrokerGiven {
		return []string{sc.Pinned}
	}
	return p.brokers()
}

func (p *Params) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, format+"\n", args...)
	}
}

// Keep says which scenarios' databases and stream outlive the run.
type Keep string

const (
	KeepNone   Keep = ""
	KeepFailed Keep = "failed"
	KeepAll    Keep = "all"
)

// Run executes scenarios, p.Parallel at a time, each isolated, and prints
// each result as one block as it completes. Report.Results keep the order of
// scs. The error is for the run itself (servers, setup); failed scenarios are
// in the report. Everything created is removed before Run returns, also when
// ctx is cancelled.
func Run(ctx context.Context, p Params, scs []*scenario.Scenario) (rep *report.Report, err error) {
	start := time.Now()
	if p.Timeout <= 0 {
		p.Timeout = time.Minute
	}
	p.Parallel = max(1, p.Parallel)
	sh := shape{}
	var jobs []job
	for _, sc := range scs {
		sh.splitDBs = sh.splitDBs || sc.DBFaults
		for _, b := range p.brokersOf(sc) {
			jobs = append(jobs, job{sc, b})
			if !slices.Contains(sh.brokers, b) {
				sh.brokers = append(sh.brokers, b)
			}
		}
	}
	if err := placeholderProblems(scs, sh.brokers); err != nil {
		return nil, err // a service could not be told what it asks for: nothing starts
	}
	w, err := openWorld(ctx, &p, sh)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, w.Close()) }()
	if err := w.checkSystems(ctx, scs); err != nil {
		return nil, err
	}
	results, err := schedule(ctx, &p, w, jobs)
	if serr := w.setupErr(); serr != nil {
		return nil, serr // a broker's server could not be had: a setup error, as before any scenario
	}
	return newReport(ctx, w, sh.brokers, start, jobs, results), errors.Join(err, context.Cause(ctx))
}

// job is one scenario on one broker: one result.
type job struct {
	sc     *scenario.Scenario
	broker string
}

// schedule runs jobs on p.Parallel workers. With FailFast, a failure stops
// new jobs from starting; the ones running finish.
func schedule(ctx context.Context, p *Params, w *World, jobs []job) ([]*report.Result, error) {
	results := make([]*report.Result, len(jobs))
	next := newPicker(w, jobs)
	var stop atomic.Bool
	var mu sync.Mutex // errs, results
	var errs []error
	out := report.NewConsole(p.Out, p.Verbose, p.Progress, len(jobs))
	defer out.Close()
	var wg sync.WaitGroup
	for range min(p.Parallel, len(jobs)) {
		wg.Go(func() {
			for {
				i, ok := next.take() // when exclusion admits it
				if !ok {
					return
				}
				if stop.Load() || ctx.Err() != nil {
					next.done(i)
					return
				}
				next.settle(i)
				res, err := guarded(func() (*report.Result, error) { return runScenario(ctx, p, w, jobs[i]) })
				if crash := w.brokerCrash(jobs[i].broker); crash != nil {
					err = crash // what the scenario saw of it (a broker gone) is its consequence
				}
				next.done(i)
				if res != nil && res.CutOff && !res.Passed() {
					interruptedWhileRunning(res, jobs[i].sc)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
					stop.Store(true)
				}
				if res != nil {
					results[i] = res
					if p.FailFast && !res.Passed() {
						stop.Store(true)
					}
				}
				mu.Unlock()
				if res != nil {
					out.Result(res)
				}
			}
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// InternalError is a panic in a scenario's worker: a bug in the runner,
// neither a failed scenario nor a server problem (the CLI exits 4 and
// writes Stack to a file). The run stops as after a setup error.
type InternalError struct {
	Value any    // what was panicked
	Stack []byte // the panicking goroutine's stack
}

func (e *InternalError) Error() string { return fmt.Sprintf("internal error: panic: %v", e.Value) }

// guarded runs f, turning a panic into an *InternalError: a panic on a
// worker goroutine would end the process at once (exit 2, the code of an
// invalid scenario), leaving the run's servers and databases behind.
func guarded(f func() (*report.Result, error)) (res *report.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, err = nil, &InternalError{Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

// allNA is the skip reason of a scenario that judged nothing because
// every check it has is n/a on its broker: never a pass by omission.
func allNA(res *report.Result) string {
	if len(res.NA) == 0 {
		return ""
	}
	for _, st := range res.Steps {
		want := st.Call.Expect.For(res.Broker)
		if len(want.Outcomes) > 0 || want.Error != nil || len(st.Result.Observed) > 0 {
			return ""
		}
	}
	return fmt.Sprintf("%s: every check is n/a on %s: %s", res.Scenario.Pos, res.Broker, res.NA[0].Reason)
}

// consumerIDSkip is why broker b cannot name one of sc's consumer ids, at
// the first step that names it ("" when it can).
func consumerIDSkip(sc *scenario.Scenario, b string) (diag.Pos, string) {
	for _, c := range sc.Steps {
		if cons, ok := c.Consumes(); ok {
			if why := broker.ConsumerIDSkip(b, []string{cons.Consumer}); why != "" {
				return c.Pos, why
			}
		}
	}
	return sc.Pos, broker.ConsumerIDSkip(b, sc.Consumers())
}

func runScenario(ctx context.Context, p *Params, w *World, j job) (*report.Result, error) {
	if err := w.brokerUp(ctx, j.broker); err != nil {
		return nil, err
	}
	start := time.Now()
	sc := j.sc
	if sc.System != nil {
		// Never run: the services would get a URL scheme they cannot parse.
		if why := sc.System.Unsupported(j.broker); why != "" {
			return &report.Result{Scenario: sc, Broker: j.broker, Label: w.Labels()[j.broker], Matrix: p.matrix(j.broker),
				Skipped: fmt.Sprintf("%s: %s", sc.SystemPos, why)}, nil
		}
	}
	if why := sc.PinnedSkip(j.broker); why != "" {
		return &report.Result{Scenario: sc, Broker: j.broker, Label: w.Labels()[j.broker], Matrix: p.matrix(j.broker),
			Skipped: why}, nil
	}
	// Never sent to a broker that cannot name it (on RabbitMQ a refused
	// queue name closes the run's shared connection).
	if at, why := consumerIDSkip(sc, j.broker); why != "" {
		return &report.Result{Scenario: sc, Broker: j.broker, Label: w.Labels()[j.broker], Matrix: p.matrix(j.broker),
			Skipped: fmt.Sprintf("%s: %s", at, why)}, nil
	}
	var iso *isolation
	var sys *sysrun.Run
	var err error
	var judged func(*report.Result)
	if sc.System != nil {
		iso, sys, err = w.acquireSystem(ctx, j.broker, sc)
		if err == nil && p.SystemRun != nil {
			judged = p.SystemRun(sc, sys)
		}
	} else {
		iso, err = w.acquire(ctx, j.broker, sc)
	}
	var be *brokerError
	if errors.As(err, &be) {
		return &report.Result{Scenario: sc, Broker: j.broker, Label: w.Labels()[j.broker], Matrix: p.matrix(j.broker), Duration: time.Since(start),
			Failures: []steps.Failure{{Pos: sc.Pos, Key: "broker", Msg: "cannot set up the scenario's broker: " + be.Error()}}}, nil
	}
	if err != nil {
		return nil, err
	}
	env := iso.env
	where := [3]string{iso.producer, iso.consumer, iso.streamKey}
	// The timeout bounds the scenario's own steps, not the isolation around
	// them. run is the run's context: its interrupt (not the timeout) is
	// what may cut a scenario off before its verdict.
	run := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, p.Timeout, fmt.Errorf("scenario timed out after %s", p.Timeout))
	defer cancel()
	res := &report.Result{Scenario: sc, Broker: j.broker, Label: w.Labels()[j.broker], Matrix: p.matrix(j.broker),
		Setup: time.Since(start), Where: where}
	res.Caps = env.Broker.Capabilities()
	// A scenario is never passed on a broker that cannot do what it asks.
	if why := lacking(sc, j.broker, env.Broker.Capabilities()); why != "" {
		res.Skipped = fmt.Sprintf("%s: %s", sc.Pos, why)
	}
	if res.Skipped == "" && usesCDC(sc) {
		skip, err := openSlot(ctx, env, iso.producer)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.File, err)
		}
		if skip != "" {
			at, _ := cdcStep(sc)
			res.Skipped = fmt.Sprintf("%s: %s", at, skip)
		}
		defer func() { env.CDC = nil }()
	}
	decided, cutOff := false, false // cutOff: the run's interrupt came before the verdict
	for _, call := range sc.Steps {
		if res.Skipped != "" {
			break
		}
		stepStart := time.Now()
		out, fails := call.Exec(ctx, env)
		res.Steps = append(res.Steps, report.StepRecord{Call: call, Result: out, Failures: fails, Duration: time.Since(stepStart)})
		if out.Skipped != "" {
			res.Skipped = fmt.Sprintf("%s: %s", call.Pos, out.Skipped)
			break
		}
		for _, a := range out.Alerts {
			res.Alerts = append(res.Alerts, fmt.Sprintf("%s: %s", call.Pos, a))
		}
		res.NA = append(res.NA, out.NA...)
		if len(fails) > 0 {
			res.Failures = fails
			// A step that failed before an interrupt failed: its verdict
			// stands, whatever settling and judging meet after.
			decided, cutOff = true, run.Err() != nil
			break
		}
	}
	// A team's system runs on after the last step: it is judged once it
	// settled, and a fault may still strike meanwhile.
	var calm *settled
	if sys != nil && res.Skipped == "" {
		calm = settleSystem(ctx, env, sys, res, cmp.Or(sc.Settle, p.Settle, DefaultSettle))
	}
	finishSystem(sys, res)
	if res.Skipped == "" && res.Passed() {
		res.Skipped = allNA(res)
	}
	// The recovered state is what the history is judged on: servers a
	// process fault left down come back first.
	var restoreErr error
	if sc.Exclusive || sc.BrokerExclusive {
		if err := w.restore(context.WithoutCancel(ctx), iso, j.broker, sc.BrokerExclusive, sc.Exclusive); err != nil {
			restoreErr = fmt.Errorf("restart the servers after %s: %w", sc.File, err)
		}
	}
	if sys != nil && res.Skipped == "" && restoreErr == nil && !fieldsMismatch(res) {
		// A team's system is judged even when a check failed: the
		// violation names what the check only shows.
		if err := judgeSystem(ctx, env, sys, res, calm); err != nil {
			res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: "history", Msg: err.Error()})
		}
	} else if sys != nil && fieldsMismatch(res) {
		res.NotJudged = notJudged("the broker entries lack the system file's stream fields, so the history cannot name their events")
	} else if res.Skipped == "" && res.Passed() && restoreErr == nil {
		if err := judgeHistory(ctx, env, res); err != nil {
			res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: "history", Msg: err.Error()})
		}
	}
	if !decided {
		cutOff = run.Err() != nil
	}
	res.CutOff = cutOff
	// What the team's services said, up to the verdict.
	res.Services = servicesSaid(sys)
	if judged != nil {
		judged(res)
	}
	if env.CDC != nil { // a slot left behind would hold back WAL for good, kept or not
		if derr := env.CDC.Drop(context.WithoutCancel(ctx)); derr != nil {
			restoreErr = errors.Join(restoreErr, derr)
		}
	}
	keep := p.Keep == KeepAll || p.Keep == KeepFailed && !res.Passed()
	if keep {
		res.Kept = w.inspect(iso, j.broker, sc.Consumers()...)
	}
	err = w.recycle(ctx, iso, keep)
	res.Duration = time.Since(start)
	if err != nil {
		// The result stands; the run reports that cleanup failed too.
		err = fmt.Errorf("cleanup of %s: %w", sc.File, err)
	}
	return res, errors.Join(restoreErr, err)
}

// interruptedWhileRunning makes a scenario whose verdict the run's
// interrupt (SIGINT, SIGTERM) came before not judged: its steps, its
// settling and its checks were cut off, and a CI report must not show that
// as a failure of the system drilled (it did: "4 failed" for a Ctrl-C). A
// step that failed before the interrupt keeps its failure (CutOff false).
func interruptedWhileRunning(res *report.Result, sc *scenario.Scenario) {
	res.Skipped = fmt.Sprintf("%s: interrupted (SIGINT or SIGTERM) while it ran: not judged", sc.Pos)
	res.Failures, res.Violations = nil, nil
}
