// Package soak drives many events through the reference pipeline with
// faults at random (runner soak --in-process), on the one engine the
// scenarios run on: a seeded generator writes a schedule of the scenario
// language's own steps, each fault a parameter of a step (produce's and
// consume's fail=divzero, relay's skip_mark, …), the runner runs it as it
// runs any scenario, and the scenarios' history checker judges it. A
// violation is shrunk and written as a scenario that `runner run FILE`
// reproduces.
package soak

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// Params configures a soak run: N events through the reference pipeline
// with faults drawn at random from the steps' own fault parameters.
type Params struct {
	Events int
	Faults float64 // probability per decision point, 0..1
	Seed   uint64
	// Workers is how many schedules run at once, each a scenario with a
	// database pair and a stream of its own, the events shared out
	// between them (0: 1; at most one per event).
	Workers int
	// Batch is how many events a schedule produces before each relay and
	// consume pass (0: 100).
	Batch int
	PGURL string
	Redis string
	// ConnectTimeout bounds the wait for a given server (runner.Params).
	ConnectTimeout time.Duration
	// Baseline also measures the raw baseline on the same servers first.
	Baseline bool
	// ViaProxies runs every connection through an unarmed protocol proxy
	// (Redis only): what the proxies cost a team's service.
	ViaProxies bool
	// Crash also draws server crashes, each a reference step: the
	// producer's PostgreSQL restarted (killed, started: crash recovery)
	// once a batch is produced, the broker's once it is relayed, the
	// consumer's once it is consumed. They need the runner's own servers
	// (not PGURL, Redis or ViaProxies).
	Crash bool
	// With are steps in the scenario language's shorthand, e.g.
	// consume(dedupe=entry_id): every step of that name the schedules
	// write gets their parameters (a soak of an anti-pattern).
	With []string
	// Out is the directory a violation's shrunk schedule is written to,
	// as a scenario; "": a violation is neither shrunk nor written.
	Out string
	// Budget bounds the shrinking of the violations (0: 5m).
	Budget time.Duration
	// Judged, when set, gets the report as soon as the history is judged:
	// before the database pairs and the servers are cleaned up, which
	// takes a while after a long soak, and before any shrinking.
	Judged func(*Report)
	// Progress, if not nil, counts the events committed and the
	// violations found (internal/progress); its owner closes it.
	Progress *progress.Reporter
}

// Validate says what is wrong with p, if anything: a soak needs events, a
// fault rate from 0 to 1, and no negative workers, batch or budget (0:
// the default).
func (p Params) Validate() error {
	switch {
	case p.Events < 1:
		return fmt.Errorf("events: want 1 or more, got %d", p.Events)
	case !(p.Faults >= 0 && p.Faults <= 1): // NaN too
		return fmt.Errorf("faults: want a rate from 0 to 1, got %g", p.Faults)
	case p.Workers < 0:
		return fmt.Errorf("workers: want 1 or more (0: 1), got %d", p.Workers)
	case p.Batch < 0:
		return fmt.Errorf("batch: want 1 or more (0: 100), got %d", p.Batch)
	case p.Budget < 0:
		return fmt.Errorf("budget: want a duration of 0 or more (0: 5m), got %s", p.Budget)
	case p.Crash && (p.PGURL != "" || p.Redis != "" || p.ViaProxies):
		return errors.New("crash: the crashes kill the runner's own servers: not with a PostgreSQL or Redis server given, nor through the proxies")
	}
	return nil
}

// Soak writes p.Workers schedules of p.Events events, runs them at once
// on the reference pipeline through the runner, and judges each with the
// scenarios' history checker; a violation is shrunk and written to p.Out.
func Soak(ctx context.Context, p Params) (*Report, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Workers, p.Batch, p.Budget = min(max(1, p.Workers), p.Events), cmpOr(p.Batch, 100), cmp0(p.Budget, 5*time.Minute)
	with, err := parseWith(p.With)
	if err != nil {
		return nil, err
	}
	scheds := make([]schedule, p.Workers)
	for k := range scheds {
		scheds[k] = generate(p, with, k)
	}
	scs, err := load(p, scheds)
	if err != nil {
		return nil, err
	}
	rp := runner.Params{PGURL: p.PGURL, URLs: map[string]string{pipeline.Broker: p.Redis}, Parallel: p.Workers,
		ConnectTimeout: p.ConnectTimeout, Timeout: timeout(scheds)}
	if p.Progress != nil {
		rp.StepDone = func(_ *scenario.Scenario, call *steps.Call, out steps.Result) {
			if call.Def.Name == "produce" {
				p.Progress.Done(int(out.Outcome["committed"]), 0)
			}
		}
	}
	sess, err := runner.OpenSessionFor(ctx, rp, scs)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	var raw float64
	if p.Baseline {
		if raw, err = rawBaseline(ctx, sess.World(), p.Events, p.Workers, p.Batch); err != nil {
			return nil, fmt.Errorf("raw baseline: %w", err)
		}
	}
	on := sess
	if p.ViaProxies {
		var undo func()
		if on, undo, err = viaProxies(ctx, sess, rp); err != nil {
			return nil, err
		}
		defer undo()
	}
	rep, results, err := run(ctx, on, p, scheds, scs, raw)
	if err != nil || p.Out == "" || len(rep.Violations) == 0 {
		return rep, err
	}
	return rep, rep.findings(ctx, on, scheds, results)
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func cmp0(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// timeout bounds one schedule's run: a minute, and 20 ms a step beyond
// (a step takes about 1 ms here).
func timeout(scheds []schedule) time.Duration {
	n := 0
	for _, s := range scheds {
		n = max(n, len(s.steps))
	}
	return time.Minute + time.Duration(n)*20*time.Millisecond
}

// load parses each schedule as the scenario loader parses a file.
func load(p Params, scheds []schedule) ([]*scenario.Scenario, error) {
	scs := make([]*scenario.Scenario, len(scheds))
	for k, s := range scheds {
		sc, err := parse(filepath.Join(p.Out, s.file), s.name, "", s.steps)
		if err != nil && len(p.With) > 0 {
			return nil, &WithError{[]string{"--with: " + err.Error()}}
		}
		if err != nil {
			return nil, err
		}
		scs[k] = sc
	}
	return scs, nil
}

func parse(file, name, comment string, steps []step) (*scenario.Scenario, error) {
	scs, errs := scenario.Parse(file, render(name, comment, steps), broker.Kinds())
	if len(errs) > 0 {
		return nil, fmt.Errorf("the generated schedule does not load (a --with that does not go with a drawn fault, or a bug in the soak):\n%w", errs)
	}
	return scs[0], nil
}

// run runs the schedules at once on pairs created before the clock
// starts, and sums up their results as soon as the last one is judged.
func run(ctx context.Context, sess *runner.Session, p Params, scheds []schedule, scs []*scenario.Scenario, raw float64) (*Report, []*report.Result, error) {
	if err := sess.Warm(ctx, scs[:min(len(scs), sess.Parallel())]); err != nil {
		return nil, nil, err
	}
	rep := &Report{Params: p, RunID: sess.World().RunID, RawPerSec: raw}
	results := make([]*report.Result, len(scs))
	var mu sync.Mutex
	var sumErr error
	left, start := len(scs), time.Now()
	p.Progress.Add(p.Events)
	_, err := sess.RunLong(ctx, scs, func(res *report.Result) {
		p.Progress.Done(0, len(res.Violations))
		mu.Lock()
		defer mu.Unlock()
		results[slices.Index(scs, res.Scenario)] = res
		if left--; left > 0 {
			return
		}
		rep.Duration = time.Since(start)
		if sumErr = rep.summarize(scheds, results); sumErr == nil && p.Judged != nil {
			p.Judged(rep)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if err == nil && left > 0 {
		err = errors.New("a schedule did not run")
	}
	if err = errors.Join(err, sumErr); err != nil {
		return nil, nil, err
	}
	return rep, results, nil
}
