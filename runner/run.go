// Package runner runs scenarios: selection and sharding, the parallel run
// loop that takes each scenario on each broker through its phases (gate,
// acquire, steps, settle, judge, recycle), the session that keeps a world
// open for several batches, and the server flags of the CLI. The servers
// and each scenario's isolation are package world's; the verdict is
// package judge's.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/pace"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/world"
)

// DefaultSettle is how long a team's system may take to settle after the
// last step before it is judged (--settle, a scenario's settle:).
const DefaultSettle = 5 * time.Second

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
	// Parallel is how many scenarios run at once (at least 1); with
	// Adaptive, the most that may.
	Parallel int
	// Adaptive lets a controller (internal/pace) choose how many run at
	// once, up to Parallel, from the CPU the running ones use and the
	// memory left; it starts at AdaptiveStart. Session.Pace says what it did.
	Adaptive bool
	// FailFast starts no new scenario after one failed.
	FailFast bool
	// Repeat runs each scenario on each broker this many times, each run
	// its own result (Result.Run of Result.Runs), to find the verdicts that
	// differ between runs (flaky ones); 0 or 1: once.
	Repeat int
	// Tags keeps scenarios with at least one of these tags; SkipTags drops
	// scenarios with any of these.
	Tags, SkipTags []string
	// Shard, when Shard.Of > 0, keeps the Index-th of Of deterministic shards.
	Shard Shard
	// Keep leaves the databases and stream of some scenarios in place and
	// prints how to inspect them (external servers only).
	Keep Keep
	// Progress, if not nil, is told of the run's scenarios and of each
	// result (internal/progress: a line on the terminal, or one a minute);
	// its owner closes it.
	Progress *progress.Reporter
	// SystemRun, when set, is told of each team system's run before its
	// first step (runner explore turns on sysrun's Observe there); the
	// function it returns, if not nil, gets the scenario's result once it
	// is judged, while the run's record is still whole.
	SystemRun func(sc *scenario.Scenario, run *sysrun.Run) func(*report.Result)
	// StepDone, when set, is told of each step of sc once it ran, with
	// what it did (the random and soak runs count the events committed,
	// for their progress line).
	StepDone func(sc *scenario.Scenario, call *steps.Call, out steps.Result)
	// judged and discard serve Session.RunLong (longrun.go): judged gets
	// each result once judged, before its pair is recycled; discard drops
	// the pair rather than reset it.
	judged  func(*report.Result)
	discard bool
	// pace is Adaptive's controller, the session's.
	pace *pace.Controller
	// Out receives the console report; Log, if set, progress messages;
	// Warn, if set, what the user must see even without Log (parallelism
	// capped by the PostgreSQL connection budget).
	Out, Log, Warn io.Writer
}

// release gives a worker's place back to the adaptive limit.
func (p *Params) release() {
	if p.pace != nil {
		p.pace.Release()
	}
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

// worldConfig is what p says of the servers.
func (p *Params) worldConfig() world.Config {
	return world.Config{PGURL: p.PGURL, URLs: p.URLs, ConnectTimeout: p.ConnectTimeout, Parallel: p.Parallel, Log: p.Log, Warn: p.Warn}
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
// ctx is cancelled. It is a session for scs, opened, run once and closed.
func Run(ctx context.Context, p Params, scs []*scenario.Scenario) (rep *report.Report, err error) {
	start := time.Now()
	s, err := OpenSessionFor(ctx, p, scs)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	rep, err = s.Run(ctx, scs)
	if rep != nil {
		rep.Duration = time.Since(start) // the run's: its servers' start too
	}
	return rep, err
}

// job is one scenario on one broker: one result.
type job struct {
	sc     *scenario.Scenario
	broker string
	run    int // which run of Params.Repeat, from 1; 0 without --repeat
}

// schedule runs jobs on p.Parallel workers. With FailFast, a failure stops
// new jobs from starting; the ones running finish.
func schedule(ctx context.Context, p *Params, w *world.World, jobs []job) ([]*report.Result, error) {
	results := make([]*report.Result, len(jobs))
	next := newPicker(w, jobs)
	var stop atomic.Bool
	var mu sync.Mutex // errs, results
	var errs []error
	out := report.NewConsole(p.Out, p.Verbose, p.Progress, len(jobs))
	if p.pace != nil { // a worker waiting for a place sees the interrupt
		defer context.AfterFunc(ctx, p.pace.Wake)()
	}
	var wg sync.WaitGroup
	for range min(p.Parallel, len(jobs)) {
		wg.Go(func() {
			for {
				if p.pace != nil && !p.pace.Acquire(ctx) {
					return // interrupted while the limit held it back
				}
				i, ok := next.take() // when exclusion admits it
				if !ok {
					p.release()
					return
				}
				if stop.Load() || ctx.Err() != nil {
					next.done(i)
					p.release()
					return
				}
				next.settle(i)
				res, err := guarded(func() (*report.Result, error) { return runScenario(ctx, p, w, jobs[i]) })
				if what, stack := w.BrokerCrash(jobs[i].broker); what != "" {
					// What the scenario saw of it (a broker gone) is its
					// consequence: the run names the crash as a panic of
					// its own (the CLI writes its stack, exit 4).
					err = &InternalError{Value: what, Stack: stack}
				}
				next.done(i)
				p.release()
				if res != nil && jobs[i].run > 0 {
					res.Run, res.Runs = jobs[i].run, p.Repeat
				}
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

// interruptedWhileRunning makes a scenario whose verdict the run's
// interrupt (SIGINT, SIGTERM) came before not judged: its steps, its
// settling and its checks were cut off, and a CI report must not show that
// as a failure of the system drilled (it did: "4 failed" for a Ctrl-C). A
// step that failed before the interrupt keeps its failure (CutOff false).
func interruptedWhileRunning(res *report.Result, sc *scenario.Scenario) {
	res.Skipped = fmt.Sprintf("%s: interrupted (SIGINT or SIGTERM) while it ran: not judged", sc.Pos)
	res.Failures, res.Violations = nil, nil
}
