package explore

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/system"
)

// Random configures --random: Events events, before each a fault with
// probability Faults at a crossing picked by a generator seeded with Seed.
type Random struct {
	Seed   uint64
	Faults float64
	Events int
}

// RandomResult is what a random run did and found.
type RandomResult struct {
	Seed     uint64   `json:"seed"`
	Events   int      `json:"events"`
	Schedule []string `json:"schedule"` // each fault, before which event
	File     string   `json:"file"`     // the schedule as a scenario
	Verdict  Verdict  `json:"-"`
	Outcome  string   `json:"outcome"`
	Finding  *Finding `json:"-"`
	Seconds  float64  `json:"seconds"`
	// Kinds counts the schedule's faults by service and action (drawn:
	// one armed near the end may never meet its crossing).
	Kinds map[string]int `json:"kinds"`
}

// randomSettle bounds the settling of a long random run: a consumer may
// still be working through a backlog the faults left.
const randomSettle = "60s"

// RandomWorkload is the random mode's workload on sys: every service
// started (producer side first, supervised), then n events, every fifth of
// them in one of three aggregates' sequences.
func RandomWorkload(ctx context.Context, sys *system.System, out string, n int, seed uint64) (*Workload, diag.Errors) {
	var b strings.Builder
	fmt.Fprintf(&b, "name: \"explore --random: %d events on %s\"\nsystem: %q\nsettle: %s\nsteps:\n", n, filepath.Base(sys.File), relSystem(out, sys.File), randomSettle)
	first, then := sides(sys)
	for _, s := range append(first, then...) {
		fmt.Fprintf(&b, "  - start: %s\n", s)
	}
	rnd := rand.New(rand.NewPCG(seed, 1))
	for i := 1; i <= n; i++ {
		agg := ""
		if i%5 == 0 {
			agg = fmt.Sprintf(", aggregate: acct-%d", i%3)
		}
		fmt.Fprintf(&b, "  - produce: {event: ev-%d, amount: %d%s}\n", i, 1+rnd.IntN(500), agg)
	}
	return parseWorkload(ctx, filepath.Join(out, "random.yaml"), []byte(b.String()), nil)
}

// Schedule draws the random faults: before each event, with probability
// rate, one fault at a trigger of the candidates (sorted, so that a seed
// gives one schedule) with an action of actions, at its next crossing.
func Schedule(w *Workload, candidates []Fault, actions []string, rate float64, seed uint64) []Fault {
	if len(candidates) == 0 || len(actions) == 0 {
		return nil
	}
	rnd := rand.New(rand.NewPCG(seed, 2))
	var out []Fault
	for _, ev := range w.Events {
		if rnd.Float64() >= rate {
			continue
		}
		f := candidates[rnd.IntN(len(candidates))]
		f.Step, f.Nth, f.Do, f.Where = ev, 1, actions[rnd.IntN(len(actions))], "step"
		out = append(out, f)
	}
	return out
}

// Candidates are the triggers a random fault may take, sorted: those of
// the fault-free run's points but for the ones only crossed while a
// service started up (before its first crossing that carried work): no
// event of the run would reach them.
func Candidates(w *Workload, xs []fault.Crossing, actions []string) []Fault {
	procs := processes(w, xs)
	var out []Fault
	for _, step := range w.Starts {
		cs := procs[step]
		work := slices.IndexFunc(cs, carries)
		late := map[string]fault.Trigger{} // by its text
		e := newEnumerator(w, step, actions[:1], len(cs))
		for i, c := range cs {
			for _, p := range e.points(c) {
				if i >= work && work >= 0 {
					late[p.On.On()] = p.On
				}
			}
		}
		for _, on := range late {
			out = append(out, Fault{Service: w.Service(step), On: on})
		}
	}
	slices.SortFunc(out, func(a, b Fault) int { return strings.Compare(a.Service+" "+a.On.On(), b.Service+" "+b.On.On()) })
	return out
}

// carries: a crossing that moved an event (a write, a publish, a read
// that handed out entries), not a service's start-up.
func carries(c fault.Crossing) bool {
	return len(c.Tables) > 0 || c.Reply == "entries" || (c.Op == "XADD" || c.Op == fault.OpPublish) && c.Reply == "ok"
}

// random runs the random mode: the schedule on the long workload, once.
func (e *explorer) random(ctx context.Context, res *Result, xs []fault.Crossing) error {
	r := e.p.Random
	long, errs := RandomWorkload(ctx, res.Workload.System, e.p.Out, r.Events, r.Seed)
	if len(errs) > 0 {
		return fmt.Errorf("explore: the random workload does not load (a bug in explore): %v", errs)
	}
	sched := Schedule(long, Candidates(res.Workload, xs, e.p.Actions), e.p.Actions, r.Faults, r.Seed)
	sched = e.applicable(sched)
	rr := &RandomResult{Seed: r.Seed, Events: r.Events}
	for _, f := range sched {
		rr.Schedule = append(rr.Schedule, fmt.Sprintf("before ev-%d: %s %s", eventNo(long, f.Step), f.Service, f))
		if rr.Kinds == nil {
			rr.Kinds = map[string]int{}
		}
		rr.Kinds[f.Service+" "+f.Do]++
	}
	res.Random = rr
	// The schedule as a scenario, to replay or read (not *.yaml: a run of
	// the out directory takes the findings only).
	rr.File = filepath.Join(e.p.Out, fmt.Sprintf("random-seed-%d.schedule", r.Seed))
	title := fmt.Sprintf("explore --random --seed %d: %d events, %d fault(s)", r.Seed, r.Events, len(sched))
	if err := outfile.Write(rr.File, long.Render(e.p.Out, title, "Replay: runner run "+rr.File, Variant{Faults: sched, Optional: true}), 0o644); err != nil { // a scenario for anyone to read
		// Nothing ran: the summary's verdict says so (the error ends the run).
		rr.Outcome, rr.File = "not run: the schedule could not be written", ""
		return err
	}
	e.logf("random: seed %d, %d events, %d fault(s) drawn; the schedule as a scenario: %s", r.Seed, r.Events, len(sched), rr.File)
	e.startProgress("events", r.Events)
	outs, err := e.run(ctx, long, []Variant{{Faults: sched}}, "random")
	if err == nil && outs[0].Outcome == Violated {
		e.prog.Done(0, 1)
	}
	e.stopProgress()
	if err != nil {
		return err
	}
	v := outs[0].Verdict
	if v.Outcome == NotReached { // a fault armed near the end whose crossing never came
		v.Outcome, v.Why = Held, "held; "+v.Why
	}
	rr.Verdict, rr.Outcome, rr.Seconds = v, v.String(), v.Took.Seconds()
	res.Workload = long // what a finding shrinks and is written from
	if v.Outcome == Violated {
		rr.Finding = &Finding{Broken: v.Broken, Why: v.Why, Minimal: Variant{Faults: sched}}
	}
	return nil
}

// eventNo is the number of the event produced at workload step i.
func eventNo(w *Workload, i int) int { return slices.Index(w.Events, i) + 1 }

func (r *RandomResult) summary(w io.Writer) {
	verdict := r.Outcome // the verdict, or why there is none (random)
	if verdict == "" {
		verdict = r.Verdict.String()
	}
	fmt.Fprintf(w, "random: seed %d, %d events, %d fault(s) (the same seed draws the same schedule): %s in %.1fs\n",
		r.Seed, r.Events, len(r.Schedule), safe.Line(verdict), r.Seconds)
	if r.Seconds > 0 {
		fmt.Fprintf(w, "  %.0f events/s over the whole run (services started, faults, recovery, settling)\n", float64(r.Events)/r.Seconds)
	}
	if len(r.Kinds) > 0 {
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(r.Kinds)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, r.Kinds[k]))
		}
		fmt.Fprintf(w, "  faults drawn per kind: %s\n", safe.Line(strings.Join(kinds, ", ")))
	}
	for i, s := range r.Schedule {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more (the JSON report has them all)\n", len(r.Schedule)-10)
			break
		}
		fmt.Fprintf(w, "  %s\n", safe.Line(s))
	}
}

// applicable turns each scheduled fault whose action does not apply at
// its trigger (a drop at a commit) to the next action that does, and
// leaves out one that takes none of them.
func (e *explorer) applicable(sched []Fault) []Fault {
	var out []Fault
	for _, f := range sched {
		if do, ok := applicable(f.On, f.Do, e.p.Actions, e.broker()); ok {
			f.Do = do
			out = append(out, f)
		}
	}
	return out
}
