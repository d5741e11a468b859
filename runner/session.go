package runner

import (
	"context"
	"errors"
	"time"

	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
)

// Session is one set of servers (a World) kept open for several batches
// of scenarios: runner explore runs a fault-free observation, then
// hundreds of one-fault variants, their shrinking and their confirmation
// on the same servers, where Run would start and stop them per batch.
type Session struct {
	p Params
	w *World
}

// OpenSession connects to (or starts) the servers p names for scenarios
// of a team's system (no server process faults: each side shares one
// PostgreSQL). Close undoes it, also when OpenSession fails half-way.
func OpenSession(ctx context.Context, p Params) (*Session, error) {
	return openSession(ctx, p, shape{brokers: p.brokers()})
}

func openSession(ctx context.Context, p Params, sh shape) (*Session, error) {
	if p.Timeout <= 0 {
		p.Timeout = time.Minute
	}
	p.Parallel = max(1, p.Parallel)
	w, err := openWorld(ctx, &p, sh)
	if err != nil {
		return nil, err
	}
	return &Session{p: p, w: w}, nil
}

// Parallel is how many scenarios a batch runs at once: p.Parallel, capped
// by what the PostgreSQL servers' connections allow.
func (s *Session) Parallel() int { return s.p.Parallel }

// Run runs one batch as Run does, on the session's servers: each scenario
// isolated, Parallel at a time; the report keeps the order of scs. A
// system file is checked against its schema on its first batch only.
func (s *Session) Run(ctx context.Context, scs []*scenario.Scenario) (*report.Report, error) {
	start := time.Now()
	var fresh []*scenario.Scenario
	for _, sc := range scs {
		if sc.System != nil && s.w.catalogs[systemKey(sc.System)] == nil {
			fresh = append(fresh, sc)
		}
	}
	if len(fresh) > 0 {
		if err := s.w.checkSystems(ctx, fresh); err != nil {
			return nil, err
		}
	}
	var jobs []job
	for _, sc := range scs {
		for _, b := range s.p.brokers() {
			jobs = append(jobs, job{sc, b})
		}
	}
	results, err := schedule(ctx, &s.p, s.w, jobs)
	return newReport(ctx, s.w, s.p.brokers(), start, jobs, results), errors.Join(err, context.Cause(ctx))
}

// newReport is a batch's report: its results in the jobs' order, the jobs
// that never ran as NotRun.
func newReport(ctx context.Context, w *World, brokers []string, start time.Time, jobs []job, results []*report.Result) *report.Report {
	rep := &report.Report{RunID: w.RunID, Duration: time.Since(start), Brokers: brokers, Labels: w.Labels(), Interrupted: ctx.Err() != nil}
	for i, r := range results {
		if r != nil {
			rep.Results = append(rep.Results, r)
		} else {
			rep.NotRun = append(rep.NotRun, jobs[i].sc)
		}
	}
	return rep
}

// Close removes everything the session created and stops the servers it
// started.
func (s *Session) Close() error { return s.w.Close() }
