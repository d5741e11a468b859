package runner

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/outboxdrill/runner/internal/pace"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"
)

// Session is one set of servers (a World) kept open for several batches
// of scenarios: runner explore runs a fault-free observation, then
// hundreds of one-fault variants, their shrinking and their confirmation
// on the same servers; Run is a session of one batch.
type Session struct {
	p Params
	w *world.World
	// brokers are the brokers the world opened: a batch's report names
	// them.
	brokers []string
	// stopPace ends the adaptive controller's sampling (nil: none).
	stopPace func()
}

// OpenSession connects to (or starts) the servers p names for scenarios
// of a team's system (no server process faults: each side shares one
// PostgreSQL). Close undoes it, also when OpenSession fails half-way.
func OpenSession(ctx context.Context, p Params) (*Session, error) {
	return openSession(ctx, p, world.Shape{Brokers: p.brokers()})
}

// OpenSessionFor is OpenSession for the scenarios scs to come, as Run
// opens one: on the brokers they run on (p's, or a pinned scenario's own
// when p names none), with the runner's own PostgreSQL split as Run splits
// it when one of them crashes a PostgreSQL (producer_db, consumer_db), a
// server per side for those scenarios, so that a crash is one side's.
// Every ${…} a service of scs is given must mean something on each of
// those brokers: checked before anything starts (an *world.InvalidError).
func OpenSessionFor(ctx context.Context, p Params, scs []*scenario.Scenario) (*Session, error) {
	var sh world.Shape
	for _, sc := range scs {
		sh.SplitDBs = sh.SplitDBs || sc.DBFaults
		for _, b := range p.brokersOf(sc) {
			if !slices.Contains(sh.Brokers, b) {
				sh.Brokers = append(sh.Brokers, b)
			}
		}
	}
	if err := placeholderProblems(scs, sh.Brokers); err != nil {
		return nil, err // a service could not be told what it asks for: nothing starts
	}
	return openSession(ctx, p, sh)
}

func openSession(ctx context.Context, p Params, sh world.Shape) (*Session, error) {
	if p.Timeout <= 0 {
		p.Timeout = time.Minute
	}
	p.Parallel = max(1, p.Parallel)
	cfg := p.worldConfig()
	w, err := world.Open(ctx, &cfg, sh)
	if err != nil {
		return nil, err
	}
	p.Parallel = cfg.Parallel // capped by the connection budget
	s := &Session{p: p, w: w, brokers: sh.Brokers}
	if p.Adaptive {
		s.startPace()
	}
	return s, nil
}

// paceEvery is how often the adaptive controller decides: a point lasts
// one to a few seconds, so a decision sees a few of them start and end.
const paceEvery = time.Second

// AdaptiveStart is how many points the adaptive controller starts at,
// under the ceiling: twice the CPUs (a point mostly waits; the first
// decision, a second in, shrinks it at once if not), at most 8: the first
// burst runs before any decision has weighed the memory a point takes.
func AdaptiveStart(ceiling int) int { return max(1, min(2*runtime.NumCPU(), 8, ceiling)) }

// startPace starts Adaptive's controller at AdaptiveStart, up to Parallel.
func (s *Session) startPace() {
	root := os.Getpid()
	read := func() (pace.Sample, error) { return pace.ReadProc(root) }
	var total int64
	if sm, err := read(); err == nil {
		total = sm.Total
	}
	c := pace.New(pace.DefaultRule(runtime.NumCPU(), s.p.Parallel, total), AdaptiveStart(s.p.Parallel), read, paceEvery)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	s.p.pace, s.stopPace = c, func() { cancel(); <-done }
}

// Pace is what the adaptive controller did so far (nil: not adaptive).
func (s *Session) Pace() *pace.Controller { return s.p.pace }

// Parallel is how many scenarios a batch runs at once: p.Parallel, capped
// by what the PostgreSQL servers' connections allow.
func (s *Session) Parallel() int { return s.p.Parallel }

// Run runs one batch on the session's servers: each scenario on each of
// its brokers, isolated, Parallel at a time; the report keeps the order
// of scs. A system file is checked against its schema on its first batch
// only.
func (s *Session) Run(ctx context.Context, scs []*scenario.Scenario) (*report.Report, error) {
	start := time.Now()
	var fresh []*scenario.Scenario
	for _, sc := range scs {
		if sc.System != nil && !s.w.Checked(sc.System) {
			fresh = append(fresh, sc)
		}
	}
	if len(fresh) > 0 {
		if err := s.w.CheckSystems(ctx, fresh); err != nil {
			return nil, err
		}
	}
	var jobs []job
	for _, sc := range scs {
		for _, b := range s.p.brokersOf(sc) {
			if s.p.Repeat <= 1 {
				jobs = append(jobs, job{sc: sc, broker: b})
				continue
			}
			for run := 1; run <= s.p.Repeat; run++ {
				jobs = append(jobs, job{sc: sc, broker: b, run: run})
			}
		}
	}
	results, err := schedule(ctx, &s.p, s.w, jobs)
	if serr := s.w.SetupErr(); serr != nil {
		return nil, serr // a broker's server could not be had: a setup error, as before any scenario
	}
	return newReport(ctx, s.w, s.brokers, start, jobs, results), errors.Join(err, context.Cause(ctx))
}

// newReport is a batch's report: its results in the jobs' order, the jobs
// that never ran as NotRun.
func newReport(ctx context.Context, w *world.World, brokers []string, start time.Time, jobs []job, results []*report.Result) *report.Report {
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
func (s *Session) Close() error {
	if s.stopPace != nil {
		s.stopPace()
	}
	return s.w.Close()
}
