package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/runner"
)

func TestSoakHoldsItsInvariants(t *testing.T) {
	tp := testParams(t)
	rep, err := Soak(t.Context(), Params{Events: 300, Faults: 0.2, Seed: 1, Workers: 2, Batch: 20,
		PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis], Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 || rep.History.Committed != 300 || rep.History.Applied != 300 {
		t.Fatalf("%s", rep.Format())
	}
	// Faults really struck, in every window the soak knows: in lock-step,
	// where the seed alone decides each. With two workers a consumer's
	// drawn fault strikes its next pass that meets work, and how many
	// passes meet work varies with the machine's load (under load, fewer
	// and fuller): a run can draw no divzero before its last such pass.
	step, err := Soak(t.Context(), Params{Events: 300, Faults: 0.2, Seed: 1, Workers: 1, Batch: 20, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]})
	if err != nil || len(step.Violations) > 0 {
		t.Fatalf("lock-step: %v\n%s", err, step.Format())
	}
	for _, kind := range []string{"produce.divzero", "relay.skip_mark", "publish.replay", "consume.divzero", "consume.skip_ack"} {
		if step.Faults[kind] == 0 {
			t.Errorf("no %s fault in:\n%s", kind, step.Format())
		}
	}
	// The two-worker run met faults in each of its stages: the producer's
	// are drawn per event (the seed fixes them), the relay's and the
	// consumers' per pass, so only their sum per stage is certain.
	for _, kinds := range [][]string{{"produce.divzero"}, {"relay.skip_mark", "publish.replay"}, {"consume.divzero", "consume.skip_ack"}} {
		n := int64(0)
		for _, k := range kinds {
			n += rep.Faults[k]
		}
		if n == 0 {
			t.Errorf("two workers: no %s fault in:\n%s", strings.Join(kinds, " or "), rep.Format())
		}
	}
	// A fault is counted where it met work: each divzero pass failed a
	// delivery at least (a pass that read nothing struck nothing).
	if f, failed := rep.Faults["consume.divzero"], rep.Outcomes[pipeline.Failed]; f > int64(failed) {
		t.Errorf("%d consume.divzero faults, but %d deliveries failed:\n%s", f, failed, rep.Format())
	}
	if rep.Outcomes[pipeline.Duplicate] == 0 || rep.RawPerSec <= 0 {
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

// The verdict is handed over as soon as the history is judged, while the
// soak's database pair still exists; the pairs (the baseline's and the
// soak's) are dropped after, none left behind.
func TestSoakVerdictBeforeCleanup(t *testing.T) {
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

// TestCheckHistoryCatchesEachViolation drains a clean soak history, breaks
// it one way per invariant (through the soak's own recorded passes where
// the damage is something the pipeline does, in the databases or the broker
// where it is something done behind its back), and checks that the soak's
// judge finds exactly the invariants broken.
func TestCheckHistoryCatchesEachViolation(t *testing.T) {
	newEvent := func(ctx context.Context, s *soak) error { // e-2, committed and relayed, not consumed
		if err := s.produce(ctx, 2); err != nil {
			return err
		}
		_, err := s.relayPass(ctx, 0)
		return err
	}
	opt := pipeline.ConsumeOptions{Consumer: soakConsumer, Worker: "w"}
	cases := map[string]func(ctx context.Context, s *soak, iso *runner.Pair) error{
		"": func(context.Context, *soak, *runner.Pair) error { return nil },
		history.Lost: func(ctx context.Context, s *soak, iso *runner.Pair) error {
			if err := s.produce(ctx, 2); err != nil {
				return err
			}
			_, err := iso.Env.Producer.Exec(ctx, `UPDATE outbox SET published = true WHERE event_id = 'e-2'`) // marked, never published
			return err
		},
		history.DoubleApplied: func(ctx context.Context, s *soak, _ *runner.Pair) error {
			if err := s.replay(ctx, "e-1"); err != nil {
				return err
			}
			o := opt
			o.DedupeByEntry = true // the new entry id gets past the inbox
			_, err := s.consume(ctx, o)
			return err
		},
		history.Phantom: func(ctx context.Context, s *soak, iso *runner.Pair) error {
			forged := broker.Message{EventID: "forged", Payload: `{"event_id":"forged","amount":1,"currency":"USD"}`}
			if _, err := iso.Env.Broker.Publish(ctx, []broker.Message{forged}); err != nil {
				return err
			}
			_, err := s.consume(ctx, opt)
			return err
		},
		history.AckedWithoutEffect: func(ctx context.Context, s *soak, _ *runner.Pair) error {
			if err := newEvent(ctx, s); err != nil {
				return err
			}
			o := opt
			o.AckFirst, o.Fault = true, pipeline.DivZero
			if _, err := s.consume(ctx, o); err != nil {
				return err
			}
			return s.replay(ctx, "e-2") // an entry waits: not lost, only acked without effect
		},
		history.ProjectionMismatch: func(ctx context.Context, _ *soak, iso *runner.Pair) error {
			_, err := iso.Env.Consumer.Exec(ctx, `UPDATE projection SET amount = amount * 2`)
			return err
		},
		history.Stranded: func(ctx context.Context, s *soak, _ *runner.Pair) error {
			if err := newEvent(ctx, s); err != nil {
				return err
			}
			o := opt
			o.Fault = pipeline.DivZero // left pending ...
			if _, err := s.consume(ctx, o); err != nil {
				return err
			}
			_, err := s.consume(ctx, opt) // ... and the consumer reads on, never claims
			return err
		},
		history.DoublePublished: func(ctx context.Context, s *soak, _ *runner.Pair) error {
			if err := s.produce(ctx, 2); err != nil {
				return err
			}
			res, err := s.env.relay.RelayConcurrently(ctx, 2, pipeline.Flag, 0)
			var pubs []pipeline.Published
			for _, r := range res {
				pubs = append(pubs, r.Published...)
			}
			s.hist.published("relay", false, pubs...) // one relay step of two relays
			if err != nil {
				return err
			}
			_, err = s.consume(ctx, opt)
			return err
		},
		history.Unbalanced: func(ctx context.Context, _ *soak, iso *runner.Pair) error {
			_, err := iso.Env.Producer.Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE account = 'acct-3'`)
			return err
		},
	}
	for _, inv := range history.ReferenceInvariants() { // stuck: a team's running system only
		if _, ok := cases[inv]; !ok {
			t.Errorf("invariant %s has no case that breaks it", inv)
		}
	}
	for inv, tamper := range cases {
		name := inv
		if name == "" {
			name = "clean"
		}
		t.Run(name, func(t *testing.T) {
			s, iso := cleanSoak(t)
			ctx := t.Context()
			if err := tamper(ctx, s, iso); err != nil {
				t.Fatal(err)
			}
			_, vs, err := s.hist.judge(ctx, s.env)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vs {
				if !slices.Contains(got, v.Invariant) {
					got = append(got, v.Invariant)
				}
			}
			want := []string{inv}
			if inv == "" {
				want = nil
			}
			if !slices.Equal(got, want) {
				t.Fatalf("want %v, got %v", want, vs)
			}
		})
	}
}

// cleanSoak is a soak without faults that produced, relayed and consumed
// e-0 and e-1, on a pair of its own.
func cleanSoak(t *testing.T) (*soak, *runner.Pair) {
	ctx := t.Context()
	p := testParams(t)
	w, err := runner.OpenWorld(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	iso, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.ReturnPair(context.WithoutCancel(ctx), iso) })
	s := &soak{p: Params{Batch: 100}, outs: map[pipeline.Outcome]int64{}, env: pipelineEnv{
		prod:  &pipeline.Producer{DB: iso.Env.Producer},
		relay: &pipeline.Relay{DB: iso.Env.Producer, Broker: iso.Env.Broker},
		cons:  &pipeline.Consumer{DB: iso.Env.Consumer, Broker: iso.Env.Broker},
		b:     iso.Env.Broker,
	}}
	for i := range 2 {
		if err := s.produce(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.relayPass(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.consume(ctx, pipeline.ConsumeOptions{Consumer: soakConsumer, Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	return s, iso
}

// TestSoakReplaysExactlyWithOneWorker: the same seed injects the same faults
// and the run takes the same course.
func TestSoakReplaysExactlyWithOneWorker(t *testing.T) {
	tp := testParams(t)
	run := func() *Report {
		rep, err := Soak(t.Context(), Params{Events: 200, Faults: 0.3, Seed: 5, Workers: 1, Batch: 10, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Violations) > 0 {
			t.Fatalf("%s", rep.Format())
		}
		return rep
	}
	a, b := run(), run()
	if fmt.Sprint(a.Faults) != fmt.Sprint(b.Faults) || fmt.Sprint(a.Outcomes) != fmt.Sprint(b.Outcomes) || a.History != b.History {
		t.Fatalf("the same seed took two courses:\n%s\n%s", a.Format(), b.Format())
	}
	for _, kind := range []string{"produce.divzero", "relay.skip_mark", "publish.replay", "consume.divzero", "consume.skip_ack"} {
		if a.Faults[kind] == 0 {
			t.Errorf("no %s fault in:\n%s", kind, a.Format())
		}
	}
}

func testParams(t testing.TB) runner.Params {
	return runner.Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}
}

// TestParamsValidate: a library caller's bad counts are an error, not a
// soak of nothing or a negative batch.
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
	} {
		if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.p, err, tc.want)
		}
		if _, err := Soak(context.Background(), tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Soak(%+v): err %v, want %q before any server", tc.p, err, tc.want)
		}
	}
}

func TestMain(m *testing.M) { testservers.Main(m) }

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
