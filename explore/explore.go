package explore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// Params configure an exploration.
type Params struct {
	Out     string         // where the minimal scenarios go
	Budget  time.Duration  // no new point starts after it; what is left is reported not explored
	Actions []string       // kill, cut, error, delay(500ms)
	Depth   int            // 1: one fault per run; 2: and a second one during the first's recovery
	NthCap  int            // points per boundary kind and process, at most
	Only    *regexp.Regexp // run only the points whose name ("consumer consumer_db.commit(table=inbox) nth=1 do=kill") matches
	Confirm int            // runs of each written scenario that confirm it
	Random  *Random        // --random: a seeded schedule instead of the systematic points
	// Runner holds the servers, the broker, --parallel, --settle and the
	// scenario timeout.
	Runner runner.Params
	Log    io.Writer // progress, one line per point that did not hold (nil: none)
	// Progress, with ProgressOut set, reports the points done (the events,
	// in the random mode), the violations so far, elapsed and what remains
	// (internal/progress); its Noun is explore's own.
	Progress    progress.Config
	ProgressOut io.Writer
	// Verbose logs every point, held ones too.
	Verbose bool
	// Shard, when Shard.Of > 0, runs only the Index-th of Of parts of the
	// points (shard.go); Map, when given, numbers the points as an earlier
	// run's record does instead of this run's fault-free run; MapOnly
	// stops once the points are numbered (the map a CI's shards share).
	Shard   runner.Shard
	Map     *Record
	MapOnly bool
}

// Result is what an exploration found.
type Result struct {
	Workload *Workload
	Observed Verdict // the fault-free run
	Map      Map
	Points   []*Point
	Findings []*Finding
	Took     time.Duration
	Explore  time.Duration // the points' share of Took
	Parallel int
	// Pace, when the session chose the parallelism (runner.Params.Adaptive):
	// what it chose, and Parallel the mean at once while the points ran.
	Pace   string
	Random *RandomResult
	Shard  *ShardInfo // which shard it is, and what a merge checks (nil: not sharded)
}

// Explore observes the workload fault-free, then runs its points, then
// shrinks and writes out each violation.
func Explore(ctx context.Context, p Params, w *Workload) (*Result, error) {
	start := time.Now()
	s, err := open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.session.Close()) }()
	res := &Result{Workload: w, Parallel: s.session.Parallel()}
	obs, err := s.run(ctx, w, []Variant{{}}, "observe")
	if err != nil {
		return nil, err
	}
	res.Observed = obs[0].Verdict
	res.Map = BuildMap(w, obs[0].crossings, obs[0].unclassified)
	s.logf("observe: the fault-free run: %s (%s); boundary map:", res.Observed, res.Observed.Took.Round(10*time.Millisecond))
	if p.Log != nil {
		res.Map.Print(p.Log)
	}
	if res.Observed.Outcome == Violated { // no fault needed: the workload is the reproduction
		f := &Finding{Broken: res.Observed.Broken, Why: res.Observed.Why}
		res.Findings = append(res.Findings, f)
		err = s.finish(ctx, w, f, start, nil)
	}
	if res.Observed.Outcome != Held {
		res.Took = time.Since(start)
		return res, err // nothing to explore against
	}
	if p.Random != nil {
		err = s.random(ctx, res, obs[0].crossings)
	} else {
		err = s.systematic(ctx, res, obs[0].crossings, start)
	}
	if err == nil {
		err = s.findings(ctx, res, start)
	}
	res.Took = time.Since(start)
	return res, err
}

// explorer is one exploration's session and what it keeps of each run.
type explorer struct {
	p       Params
	session *runner.Session
	mu      sync.Mutex
	records map[*scenario.Scenario]*record
	seq     int                 // names runs apart
	prog    *progress.Reporter  // the points' or the random run's progress (nil: none)
	wrote   map[string]*Finding // the files written, each a finding's own
}

// record is what a run's services crossed.
type record struct {
	crossings    []fault.Crossing
	unclassified []sysrun.Unclassified
	// starts maps the run's start steps to the workload's, whose
	// positions the crossings are given (a variant's lines differ).
	starts map[diag.Pos]diag.Pos
	// steps maps each of the run's steps that is the workload's to the
	// workload's step: a failure is said at the workload's position, not
	// at the variant's file, which is gone once explore ends.
	steps  map[diag.Pos]diag.Pos
	faults []Fault // the schedule it ran
	// counted: the progress counts this run (a point; the random run's
	// events), not the observing, shrinking and confirming runs.
	counted bool
	// observe: the databases' proxies learn what every commit wrote (the
	// fault-free run, and runs whose crossings a later stage reads); off,
	// a point's run pays only for its own trigger's round trips.
	observe bool
}

// newRecord maps the start steps of sc, variant v of w, to w's.
func newRecord(w *Workload, v Variant, sc *scenario.Scenario) *record {
	r := &record{starts: map[diag.Pos]diag.Pos{}, steps: map[diag.Pos]diag.Pos{}, faults: v.Faults}
	k := 0 // the rendered step: the workload's, with fault steps put in (Render)
	for i := range w.steps {
		for _, f := range v.Faults {
			if f.Where == "step" && f.Step == i {
				k += 2 // the catch-up sleep and the fault
			}
		}
		if !w.renders(i, v) {
			continue
		}
		if k < len(sc.Steps) && sc.Steps[k].Def.Name == "start" {
			r.starts[sc.Steps[k].Pos] = w.calls[i].Pos
		}
		if k < len(sc.Steps) {
			r.steps[sc.Steps[k].Pos] = w.calls[i].Pos
		}
		k++
	}
	return r
}

// atWorkload is why with a position in the run's file sc (a variant
// rendered to a temp file) said at the workload step it falls in.
func (r *record) atWorkload(sc *scenario.Scenario, why string) string {
	rest, ok := strings.CutPrefix(why, sc.File+":")
	if !ok {
		return why
	}
	var line int
	if _, err := fmt.Sscanf(rest, "%d:", &line); err != nil {
		return why
	}
	_, msg, _ := strings.Cut(strings.TrimLeft(rest, "0123456789:"), " ")
	var in *diag.Pos
	for _, st := range sc.Steps {
		if st.Pos.Line <= line {
			in = &st.Pos
		}
	}
	if in == nil {
		return why
	}
	if at, ok := r.steps[*in]; ok {
		return fmt.Sprintf("%s: %s", at, msg)
	}
	return why
}

// outcome is one run: its verdict and what was crossed.
type outcome struct {
	Verdict
	record
	res *report.Result
}

func open(ctx context.Context, p Params) (*explorer, error) {
	e := &explorer{p: p, records: map[*scenario.Scenario]*record{}}
	rp := p.Runner
	rp.Out, rp.Log, rp.Progress, rp.Verbose = io.Discard, nil, nil, false
	rp.SystemRun = func(sc *scenario.Scenario, run *sysrun.Run) func(*report.Result) {
		e.mu.Lock()
		observe := e.records[sc] != nil && e.records[sc].observe
		e.mu.Unlock()
		if observe {
			run.Observe()
		}
		return func(res *report.Result) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if n := run.Dropped(); observe && n > 0 {
				// A boundary map with crossings left out would explore fewer
				// points and say nothing: the run is not judged instead.
				res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: steps.ErrorKey,
					Msg: fmt.Sprintf("the proxies' records left %d event(s) out (each keeps %d MB of what it relayed): the boundary map would be incomplete", n, fault.MaxRecordBytes>>20)})
			}
			if r := e.records[sc]; r != nil {
				r.crossings, r.unclassified = run.Crossings(), run.Unclassified()
				for i, c := range r.crossings {
					r.crossings[i].Start = r.starts[c.Start]
				}
				e.count(r, res)
			}
		}
	}
	rp.StepDone = e.stepDone
	s, err := runner.OpenSession(ctx, rp)
	if err != nil {
		return nil, err
	}
	e.session = s
	return e, nil
}

// run runs the variants of the workload as one batch, Parallel at once.
func (e *explorer) run(ctx context.Context, w *Workload, vs []Variant, what string) ([]outcome, error) {
	scs := make([]*scenario.Scenario, len(vs))
	for i, v := range vs {
		e.seq++
		file := filepath.Join(e.p.Out, fmt.Sprintf(".explore-%s-%d.yaml", what, e.seq))
		parsed, errs := scenario.ParseContext(ctx, file, w.Render(e.p.Out, fmt.Sprintf("explore %s %d", what, e.seq), "", v), broker.Kinds())
		if len(errs) > 0 {
			return nil, fmt.Errorf("explore: a variant of the workload does not load (a bug in explore): %v", errs)
		}
		scs[i] = parsed[0]
		e.mu.Lock()
		e.records[scs[i]] = newRecord(w, v, scs[i])
		e.records[scs[i]].observe = what == "observe" || e.p.Depth >= 2 || e.p.Random != nil
		e.records[scs[i]].counted = what == "point" || what == "random"
		e.mu.Unlock()
	}
	return e.runScenarios(ctx, scs)
}

// runScenarios runs loaded scenarios as one batch and reads each outcome.
func (e *explorer) runScenarios(ctx context.Context, scs []*scenario.Scenario) ([]outcome, error) {
	rep, err := e.session.Run(ctx, scs)
	if rep == nil {
		return nil, err
	}
	byScenario := map[*scenario.Scenario]*report.Result{}
	for _, r := range rep.Results {
		byScenario[r.Scenario] = r
	}
	out := make([]outcome, len(scs))
	e.mu.Lock()
	for i, sc := range scs {
		res := byScenario[sc]
		out[i] = outcome{Verdict: classify(res), res: res}
		if r := e.records[sc]; r != nil {
			out[i].Verdict = out[i].Verdict.afterPipelinedError(r.faults)
			out[i].Why = r.atWorkload(sc, out[i].Why)
		}
		if r := e.records[sc]; r != nil {
			out[i].record = *r
		}
		delete(e.records, sc)
	}
	e.mu.Unlock()
	return out, err
}

// systematic runs every point not pruned, a batch at a time,
// until the budget is spent.
func (e *explorer) systematic(ctx context.Context, res *Result, xs []fault.Crossing, start time.Time) error {
	res.Points = Enumerate(res.Workload, xs, e.p.Actions, e.p.NthCap)
	PruneInapplicable(res.Points, e.broker())
	res.Points = append(res.Points, unclassifiedPoints(res.Workload, xs, res.Map.unclassified, len(res.Points))...)
	e.only(res.Points)
	e.shard(res)
	e.logf("points: %s; %s", pointCounts(res.Points), e.parallelSays(res))
	if e.mapOnly(res) {
		return nil
	}
	began := time.Now()
	defer e.paced(res, began)()
	e.startProgress("points", len(runnable(res.Points)))
	defer e.stopProgress()
	runs, err := e.runPoints(ctx, res, runnable(res.Points), start)
	if err != nil || e.p.Depth < 2 {
		return err
	}
	pairs, pruned := Pairs(res.Workload, res.Points, runs, e.p.Actions, e.p.NthCap)
	PruneInapplicable(pairs, e.broker())
	e.only(pairs)
	res.Points = append(res.Points, pairs...)
	for i, p := range res.Points {
		p.ID = i + 1
	}
	e.logf("depth 2: pairs: %s", pointCounts(append(pairs, pruned...)))
	e.prog.Add(len(runnable(pairs)))
	_, err = e.runPoints(ctx, res, runnable(pairs), start)
	return err
}

// parallelSays says how many points run at once.
func (e *explorer) parallelSays(res *Result) string {
	if e.session.Pace() != nil {
		return fmt.Sprintf("parallel adaptive (from %d, up to %d)", runner.AdaptiveStart(res.Parallel), res.Parallel)
	}
	return fmt.Sprintf("parallel %d", res.Parallel)
}

// paced returns what sets, once the points ran, how long they took and,
// when the session chose the parallelism, the mean at once meanwhile.
func (e *explorer) paced(res *Result, began time.Time) func() {
	c := e.session.Pace()
	var area float64
	if c != nil {
		area = c.Area()
	}
	return func() {
		res.Explore = time.Since(began)
		if c == nil || res.Explore <= 0 {
			return
		}
		mean := (c.Area() - area) / res.Explore.Seconds()
		res.Parallel, res.Pace = max(1, int(math.Round(mean))), c.Summary().String()
	}
}

// broker is the run's broker (explore runs on one), the default broker
// (redis) unless given.
func (e *explorer) broker() string {
	if len(e.p.Runner.Brokers) > 0 {
		return e.p.Runner.Brokers[0]
	}
	return broker.Default()
}

// only prunes the points --only does not select.
func (e *explorer) only(ps []*Point) {
	for _, pt := range ps {
		if e.p.Only != nil && pt.Pruned == "" && pt.Outcome == "" && !e.p.Only.MatchString(pt.String()) {
			pt.Pruned = "not selected (--only)"
		}
	}
}

// pointRounds is how many rounds of Parallel points one batch holds.
const pointRounds = 4

// runPoints runs points a batch at a time until the budget is spent, and
// returns what each run crossed (read for depth 2).
func (e *explorer) runPoints(ctx context.Context, res *Result, todo []*Point, start time.Time) (map[*Point][]fault.Crossing, error) {
	runs := map[*Point][]fault.Crossing{}
	done, total := 0, len(todo)
	for len(todo) > 0 {
		if time.Since(start) >= e.p.Budget {
			for _, pt := range todo {
				pt.Outcome, pt.Why = NotRun, fmt.Sprintf("the budget (%s) ran out", e.p.Budget)
			}
			return runs, nil
		}
		// A batch is a few rounds of Parallel: the session keeps its
		// workers busy within it, and only its end waits for the slowest
		// point (a batch of Parallel waited at every round). The budget
		// is looked at between batches.
		batch := todo[:min(len(todo), res.Parallel*pointRounds)]
		todo = todo[len(batch):]
		vs := make([]Variant, len(batch))
		for i, pt := range batch {
			vs[i] = Variant{Faults: pt.Faults()}
		}
		outs, err := e.run(ctx, res.Workload, vs, "point")
		if ctx.Err() != nil {
			// Interrupted: what this batch saw ended with the cancel, and
			// the rest never started. None of it is a verdict.
			for _, pt := range append(batch, todo...) {
				pt.Outcome, pt.Why = NotRun, "the run was interrupted before it ended"
			}
			return runs, err
		}
		if err != nil {
			return runs, err
		}
		for i, pt := range batch {
			pt.Verdict, runs[pt] = outs[i].Verdict, outs[i].crossings
			done++
			if e.p.Verbose || pt.Outcome != Held {
				e.logf("  [%d/%d] %s: %s", done, total, pt, pt.Verdict)
			}
		}
	}
	return runs, nil
}

// runnable are the points neither pruned nor run yet.
func runnable(ps []*Point) []*Point {
	var out []*Point
	for _, p := range ps {
		if p.Pruned == "" && p.Outcome == "" {
			out = append(out, p)
		}
	}
	return out
}

// pointCounts says how many points run and why the others do not.
func pointCounts(ps []*Point) string {
	run, uncl, why := 0, 0, map[string]int{}
	for _, p := range ps {
		if p.Outcome == Unclassed {
			uncl++
			continue
		}
		if p.Pruned == "" {
			run++
			continue
		}
		why[pruneKind(p.Pruned)]++
	}
	s := fmt.Sprintf("%d to run", run)
	if uncl > 0 {
		s += fmt.Sprintf(", %d unclassifiable (never run: the proxy cannot strike it exactly)", uncl)
	}
	if len(why) > 0 {
		s += fmt.Sprintf(", %d pruned (%s)", len(ps)-run-uncl, kindCounts(why))
	}
	return s
}

// pruneKind is why a point was pruned, as counts name it ("duplicates").
func pruneKind(pruned string) string {
	k, _, _ := strings.Cut(pruned, " (")
	switch {
	case strings.HasPrefix(k, "duplicate of"):
		k = "duplicates"
	case strings.HasPrefix(k, "an idle poll"):
		k = "idle polls"
	case strings.HasPrefix(k, "the same as request error"):
		k = "reply errors (= request errors)"
	case strings.HasPrefix(k, "past the nth cap"):
		k = "past the nth cap"
	case strings.HasPrefix(k, "not selected"):
		k = notSelected
	case strings.HasPrefix(k, "a depth-1 point again"):
		k = "depth-1 points again (the first fault struck before its process did anything)"
	}
	return k
}

// notSelected is the kind of the points --only left out (the JSON's
// "not selected (--only)").
const notSelected = "not selected by --only"

// kindCounts is "3 duplicates, 2 idle polls", sorted.
func kindCounts(why map[string]int) string {
	var parts []string
	for k, n := range why {
		parts = append(parts, fmt.Sprintf("%d %s", n, k))
	}
	sortStrings(parts)
	return strings.Join(parts, ", ")
}

func (e *explorer) logf(format string, args ...any) {
	if e.p.Log != nil {
		// Above the progress line, when both go to one terminal.
		e.mu.Lock()
		prog := e.prog
		e.mu.Unlock()
		prog.Above(func() { fmt.Fprintf(e.p.Log, format+"\n", args...) })
	}
}
