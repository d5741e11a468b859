package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// oldKinds are the fault windows the soak has always struck: a produce
// rolled back, a relay that did not mark, a replay, a consume that failed
// or did not ack.
var oldKinds = []string{produceFail, skipMark, replay, consumeFail, consumeAck}

func TestSoakHoldsItsInvariants(t *testing.T) {
	t.Parallel()
	tp := testParams(t)
	rep, err := Soak(t.Context(), Params{Events: 300, Faults: 0.2, Seed: 1, Workers: 2, Batch: 20,
		PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis], Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 || rep.History.Committed != 300 || rep.History.Applied != 300 || rep.History.Pending != 0 {
		t.Fatalf("%s", rep.Format())
	}
	// The reference pipeline is judged on what it always was, but for
	// per-aggregate order: the schedule names no aggregate, so there is
	// nothing to order, and that is said, never shown as held.
	order := []string{history.Gap, history.OutOfOrder}
	want := slices.DeleteFunc(history.ReferenceInvariants(), func(inv string) bool { return slices.Contains(order, inv) })
	if !slices.Equal(rep.Judged, want) || len(rep.NotJudged) != 2 || !strings.Contains(rep.NotJudged[history.Gap], "no committed event of the run belongs to an aggregate") {
		t.Errorf("judged %v (not judged %v), want %v, and %v not judged", rep.Judged, rep.NotJudged, want, order)
	}
	// Faults really struck, in every window the soak knows, with one
	// schedule and with two: the seed alone decides each.
	step, err := Soak(t.Context(), Params{Events: 300, Faults: 0.2, Seed: 1, Workers: 1, Batch: 20, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]})
	if err != nil || len(step.Violations) > 0 {
		t.Fatalf("one schedule: %v\n%s", err, step.Format())
	}
	for _, r := range []*Report{rep, step} {
		for _, kind := range oldKinds {
			if r.Faults[kind] == 0 {
				t.Errorf("no %s fault in:\n%s", kind, r.Format())
			}
		}
	}
	// A fault is counted where it met work: each divzero pass failed a
	// delivery at least (a pass that read nothing struck nothing).
	if f, failed := rep.Faults[consumeFail]+rep.Faults[claimFail], rep.Outcomes["failed"]; f == 0 || f > failed {
		t.Errorf("%d consume and claim divzero faults, but %d deliveries failed:\n%s", f, failed, rep.Format())
	}
	if rep.Outcomes["duplicate"] == 0 || rep.RawPerSec <= 0 {
		t.Errorf("no duplicates delivered or no baseline:\n%s", rep.Format())
	}
	// The faults' recovery is work beyond the baseline's; without faults
	// there is none.
	if w := rep.Work(); w <= 1.05 {
		t.Errorf("faults 0.2 added %.0f%% work, want more than 5%%:\n%s", 100*(w-1), rep.Format())
	}
	clean, err := Soak(t.Context(), Params{Events: 100, Seed: 1, Workers: 2, Batch: 20, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]})
	if err != nil || clean.Work() != 1 {
		t.Errorf("without faults the work is %v, want 1 (%v)", clean.Work(), err)
	}
}

// TestSoakCrashes: with Crash the schedules also restart the producer's
// and the consumer's PostgreSQL and the broker (the runner's own servers,
// a PostgreSQL per side), and the reference pipeline still holds.
func TestSoakCrashes(t *testing.T) {
	t.Parallel()
	rep, err := Soak(t.Context(), Params{Events: 200, Faults: 0.3, Seed: 1, Workers: 2, Batch: 20, Crash: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 || rep.History.Committed != 200 || rep.History.Applied != 200 || rep.History.Pending != 0 {
		t.Fatalf("%s", rep.Format())
	}
	for _, kind := range append([]string{producerCrash, brokerCrash, consumerCrash}, oldKinds...) {
		if rep.Faults[kind] == 0 {
			t.Errorf("no %s in:\n%s", kind, rep.Format())
		}
	}
}

// The verdict is handed over as soon as the history is judged, while the
// soak's database pair still exists; the pairs (the baseline's and the
// soak's) are dropped after, none left behind.
func TestSoakVerdictBeforeCleanup(t *testing.T) {
	t.Parallel()
	tp := testParams(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, tp.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ours := func(runID string) int { // the run's databases
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE starts_with(datname, $1)", "drill_"+runID+"_").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	atVerdict := -1
	var judged *Report
	rep, err := Soak(ctx, Params{Events: 50, Faults: 0.1, Seed: 1, Workers: 1, Batch: 10, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis], Baseline: true,
		Judged: func(r *Report) { judged, atVerdict = r, ours(r.RunID) }})
	if err != nil {
		t.Fatal(err)
	}
	if judged != rep {
		t.Fatalf("Judged got %p, Soak returned %p", judged, rep)
	}
	if atVerdict != 2 {
		t.Errorf("at the verdict the run has %d databases, want 2 (the soak's pair, not yet dropped; the baseline's already)", atVerdict)
	}
	if after := ours(rep.RunID); after != 0 {
		t.Errorf("after the soak the run left %d databases", after)
	}
}

// tamperParams are the parameters of tamper, a step of this test only:
// damage done behind the pipeline's back, in a database, as a step of
// the schedule (the runner judges a scenario once its steps ran).
type tamperParams struct {
	Side string `param:"side" required:"yes" enum:"producer|consumer" doc:"the database"`
	SQL  string `param:"sql" required:"yes" doc:"the statement"`
}

// tamperStep is registered by TestMain, as a program registers a step of
// its own.
var tamperStep = steps.Define("tamper", "Test only: run a statement on one side's database.", nil,
	func(ctx context.Context, env *steps.Env, p *tamperParams) (steps.Result, error) {
		db := env.Producer
		if p.Side == "consumer" {
			db = env.Consumer
		}
		_, err := db.Exec(ctx, p.SQL)
		return steps.Result{}, err
	})

// TestCheckHistoryCatchesEachViolation runs a clean schedule, broken one
// way per invariant (through the steps' own parameters where the damage is
// something the pipeline does, in the databases where it is something done
// behind its back), on the soak's path, and checks that the verdict names
// exactly the invariants broken.
func TestCheckHistoryCatchesEachViolation(t *testing.T) {
	t.Parallel()
	g := &generator{rnd: rand.New(rand.NewPCG(1, 1))} // rate 0: no fault drawn
	s := func(name string, kv ...string) step {
		var ps []param
		for i := 0; i < len(kv); i += 2 {
			ps = append(ps, param{kv[i], kv[i+1]})
		}
		return step{name: name, params: ps}
	}
	produce := func(i int) step { g.steps = nil; g.produce(i); return g.steps[0] }
	tamper := func(side, sql string) step { return s("tamper", "side", side, "sql", scalar(sql)) }
	newEvent := []step{produce(2), s("relay")} // e-2, committed and relayed, not consumed
	cases := map[string][]step{
		"":                    nil,
		history.Lost:          {produce(2), tamper("producer", `UPDATE outbox SET published = true WHERE event_id = 'e-2'`)}, // marked, never published
		history.DoubleApplied: {s("publish", "event", "e-1"), s("consume", "dedupe", "entry_id")},                            // the new entry id gets past the inbox
		history.Phantom:       {s("publish", "event", "forged"), s("consume")},
		history.AckedWithoutEffect: append(slices.Clone(newEvent), s("consume", "mode", "ack_first", "fail", "divzero"),
			s("publish", "event", "e-2")), // an entry waits: not lost, only acked without effect
		history.ProjectionMismatch: {tamper("consumer", `UPDATE projection SET amount = amount * 2`)},
		history.Stranded:           append(slices.Clone(newEvent), s("consume", "fail", "divzero"), s("consume")), // left pending, never claimed
		history.DoublePublished:    {produce(2), s("relay", "workers", "2", "lease", "flag"), s("consume")},
		history.Unbalanced:         {tamper("producer", `UPDATE accounts SET balance = balance + 1 WHERE account = 'acct-3'`)},
		// Version 2 of an aggregate overtakes version 1 (a raw publish),
		// and a consumer without ordering applies what comes first.
		history.OutOfOrder: {s("produce", "event", "o-1", "aggregate", "acct-9"), s("produce", "event", "o-2", "aggregate", "acct-9"),
			s("publish", "event", "o-2"), s("consume"), s("relay"), s("consume")},
		history.Gap: {s("produce", "event", "o-1", "aggregate", "acct-9"), s("produce", "event", "o-2", "aggregate", "acct-9"),
			s("publish", "event", "o-2"), s("consume")}, // version 1 still in the outbox
	}
	for _, inv := range history.ReferenceInvariants() { // stuck: a team's running system only
		if _, ok := cases[inv]; !ok {
			t.Errorf("invariant %s has no case that breaks it", inv)
		}
	}
	clean := []step{produce(0), produce(1), s("relay"), s("consume")} // e-0 and e-1 through the pipeline
	var scheds []schedule
	invs := slices.Sorted(maps.Keys(cases))
	for _, inv := range invs {
		scheds = append(scheds, schedule{name: "breaks " + inv, file: inv + ".yaml", steps: append(slices.Clone(clean), cases[inv]...)})
	}
	_, results := runSchedules(t, scheds)
	for i, inv := range invs {
		var got []string
		for _, v := range results[i].Violations {
			if !slices.Contains(got, v.Invariant) {
				got = append(got, v.Invariant)
			}
		}
		want := []string{inv}
		if inv == "" {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: want %v, got %v", inv, want, results[i].Violations)
		}
	}
}

// runSchedules runs hand-made schedules on the soak's path: loaded as the
// generated ones, run and summed up by run.
func runSchedules(t *testing.T, scheds []schedule) (*Report, []*report.Result) {
	t.Helper()
	tp := testParams(t)
	p := Params{Events: 1, Workers: len(scheds), Batch: 100}
	scs, err := load(p, scheds)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := runner.OpenSession(t.Context(), runner.Params{PGURL: tp.PGURL, URLs: tp.URLs, Parallel: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	rep, results, err := run(t.Context(), sess, p, scheds, scs, 0)
	if err != nil {
		t.Fatal(err)
	}
	return rep, results
}

// TestSoakReplaysExactly: the same seed writes the same schedules, which
// take the same course, with one schedule or several.
func TestSoakReplaysExactly(t *testing.T) {
	t.Parallel()
	tp := testParams(t)
	for _, workers := range []int{1, 2} {
		p := Params{Events: 200, Faults: 0.3, Seed: 5, Workers: workers, Batch: 10, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]}
		run := func() *Report {
			rep, err := Soak(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) > 0 {
				t.Fatalf("%s", rep.Format())
			}
			return rep
		}
		a, b := run(), run()
		if fmt.Sprint(a.Faults) != fmt.Sprint(b.Faults) || fmt.Sprint(a.Outcomes) != fmt.Sprint(b.Outcomes) || a.History != b.History || a.Steps != b.Steps {
			t.Fatalf("the same seed took two courses:\n%s\n%s", a.Format(), b.Format())
		}
		for _, kind := range oldKinds {
			if a.Faults[kind] == 0 {
				t.Errorf("no %s fault in:\n%s", kind, a.Format())
			}
		}
		q := p
		q.Workers, q.Batch = workers, 10
		for k := range workers {
			if x, y := render("s", "", generate(q, nil, k).steps), render("s", "", generate(q, nil, k).steps); string(x) != string(y) {
				t.Errorf("schedule %d: the seed wrote two schedules", k)
			}
		}
	}
}

// TestSoakShrinksAndWritesAViolation: a soak of an anti-pattern (dedupe
// by entry id, with replays and relays that do not mark) finds
// double_applied, shrinks each schedule that broke it to a few steps and
// writes it where runner run reproduces it.
func TestSoakShrinksAndWritesAViolation(t *testing.T) {
	t.Parallel()
	tp := testParams(t)
	out := t.TempDir()
	rep, err := Soak(t.Context(), Params{Events: 100, Faults: 0.3, Seed: 2, Workers: 2, Batch: 10, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis],
		With: []string{"consume(dedupe=entry_id)"}, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) == 0 || len(rep.Findings) == 0 {
		t.Fatalf("no violation found or written:\n%s", rep.Format())
	}
	for _, f := range rep.Findings {
		if !slices.Equal(f.Broken, []string{history.DoubleApplied}) || !f.Reproduced || f.Kept > 6 || f.Kept >= f.Steps {
			t.Errorf("finding %+v, want double_applied, reproduced, a few steps kept:\n%s", f, rep.Format())
		}
		text, err := os.ReadFile(f.File)
		if err != nil || !strings.Contains(string(text), "dedupe: entry_id") || !strings.Contains(string(text), "runner run "+f.File) {
			t.Errorf("%s: %v\n%s", f.File, err, text)
		}
		scs, errs := scenario.LoadFiles([]string{f.File}, broker.Kinds())
		if len(errs) > 0 {
			t.Fatalf("%s does not load: %v", f.File, errs)
		}
		res, err := runner.Run(t.Context(), runner.Params{PGURL: tp.PGURL, URLs: tp.URLs}, scs)
		if err != nil || res.Failed() != 1 || len(res.Results[0].Violations) == 0 {
			t.Errorf("runner run %s: want it to fail with double_applied (%v)", f.File, err)
		}
	}
	if !strings.Contains(rep.Format(), "replay with  runner soak --in-process --events 100 --faults 0.3 --seed 2 --parallel 2 --batch 10 --with 'consume(dedupe=entry_id)'\n") {
		t.Errorf("no replay command in:\n%s", rep.Format())
	}
}

func testParams(t testing.TB) runner.Params {
	return runner.Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}
}

// TestParamsValidate: a library caller's bad counts are an error, not a
// soak of nothing or a negative batch; a --with the language refuses is
// a usage error naming every problem.
func TestParamsValidate(t *testing.T) {
	ok := Params{Events: 1, Faults: 0.1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{Events: 0}, "events: want 1 or more, got 0"},
		{Params{Events: 1, Faults: 1.5}, "faults: want a rate from 0 to 1, got 1.5"},
		{Params{Events: 1, Faults: -0.1}, "faults: want a rate from 0 to 1"},
		{Params{Events: 1, Workers: -1}, "workers: want 1 or more"},
		{Params{Events: 1, Batch: -1}, "batch: want 1 or more (0: 100), got -1"},
		{Params{Events: 1, Budget: -1}, "budget: want a duration of 0 or more"},
		{Params{Events: 1, Crash: true, PGURL: "postgres://localhost/x"}, "crash: the crashes kill the runner's own servers"},
		{Params{Events: 1, With: []string{"consume(dedup=entry_id)", "sleep(1s)"}},
			`--with "consume(dedup=entry_id)": unknown parameter "dedup" (did you mean "dedupe"?)` + "; known: consumer, projection, fail, fail_event, skip_ack, nack, max_deliveries, mode, dedupe, ordering, worker, count, block, broker_txn\n" +
				`--with "sleep(1s)": a schedule has no sleep step`},
	} {
		if err := tc.p.Validate(); len(tc.p.With) == 0 && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: err %v, want %q", tc.p, err, tc.want)
		}
		_, err := Soak(context.Background(), tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Soak(%+v): err %v, want %q before any server", tc.p, err, tc.want)
		}
		if len(tc.p.With) > 0 && !errors.As(err, new(*WithError)) {
			t.Errorf("Soak(%+v): %T, want a *WithError", tc.p, err)
		}
	}
}

func TestMain(m *testing.M) {
	steps.Register(tamperStep)
	testservers.Main(m)
}

// TestTheReplayCommandRunsThisEngine: the command a violation prints is
// the in-process engine's (without --in-process, --batch is refused and
// the soak would be explore's random mode).
func TestTheReplayCommandRunsThisEngine(t *testing.T) {
	rep := &Report{Params: Params{Events: 5, Faults: 0.5, Seed: 9, Workers: 1, Batch: 3},
		Violations: []history.Violation{{Invariant: history.Lost, EventID: "e-1"}}}
	if want := "replay with  runner soak --in-process --events 5 --faults 0.5 --seed 9 --parallel 1 --batch 3\n"; !strings.Contains(rep.Format(), want) {
		t.Errorf("want %q in:\n%s", want, rep.Format())
	}
}
