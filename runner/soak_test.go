package runner

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"outboxdrill/broker"
	"outboxdrill/pipeline"
)

func TestSoakHoldsItsInvariants(t *testing.T) {
	tp := testParams(t)
	rep, err := Soak(t.Context(), SoakParams{Events: 300, Faults: 0.2, Seed: 1, Workers: 2, Batch: 20,
		PGURL: tp.PGURL, Redis: tp.RedisURL, Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) > 0 || rep.History.Committed != 300 || rep.History.Applied != 300 {
		t.Fatalf("%s", rep.Format())
	}
	// Faults really struck, in every window the soak knows.
	for _, kind := range []string{"produce.divzero", "relay.skip_mark", "publish.replay", "consume.divzero", "consume.skip_ack"} {
		if rep.Faults[kind] == 0 {
			t.Errorf("no %s fault in:\n%s", kind, rep.Format())
		}
	}
	if rep.Outcomes[pipeline.Duplicate] == 0 || rep.RawPerSec <= 0 {
		t.Errorf("no duplicates delivered or no baseline:\n%s", rep.Format())
	}
}

// TestCheckHistoryCatchesEachViolation tampers with a clean history, one way
// at a time, and checks the checker names the invariant broken.
func TestCheckHistoryCatchesEachViolation(t *testing.T) {
	for _, tc := range []struct {
		invariant string
		tamper    func(ctx context.Context, iso *isolation) error
	}{
		{"", func(context.Context, *isolation) error { return nil }},
		{"no loss", func(ctx context.Context, iso *isolation) error {
			_, err := iso.pools[1].Exec(ctx, `DELETE FROM inbox WHERE event_id = 'bus-2'`)
			return err
		}},
		{"no loss", func(ctx context.Context, iso *isolation) error {
			_, err := iso.pools[0].Exec(ctx, `UPDATE outbox SET published = false WHERE event_id = 'bus-1'`)
			return err
		}},
		{"exactly-once effect", func(ctx context.Context, iso *isolation) error {
			_, err := iso.pools[1].Exec(ctx, `UPDATE projection SET amount = amount * 2, events = events * 2`)
			return err
		}},
		{"no phantom", func(ctx context.Context, iso *isolation) error {
			_, err := iso.env.Broker.Publish(ctx, []broker.Message{{EventID: "forged", Payload: "{}"}})
			return err
		}},
		{"double entry", func(ctx context.Context, iso *isolation) error {
			_, err := iso.pools[0].Exec(ctx, `UPDATE accounts SET balance = balance + 1 WHERE account = 'bob'`)
			return err
		}},
		{"nothing stranded", func(ctx context.Context, iso *isolation) error {
			if _, err := iso.env.Broker.Publish(ctx, []broker.Message{{EventID: "bus-1", Payload: `{"event_id":"bus-1"}`}}); err != nil {
				return err
			}
			_, err := iso.env.Broker.Read(ctx, "accounting", "w", 0, 0) // delivered, never acked
			return err
		}},
	} {
		t.Run(tc.invariant, func(t *testing.T) {
			ctx := t.Context()
			p := testParams(t)
			w, err := OpenWorld(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			iso, err := w.acquire(ctx, broker.Redis, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.recycle(ctx, iso, false)
			prod := &pipeline.Producer{DB: iso.env.Producer}
			for _, id := range []string{"bus-1", "bus-2"} {
				if _, err := prod.Produce(ctx, pipeline.Transfer{EventID: id, From: "alice", To: "bob", Amount: 5, Currency: "USD"}, pipeline.NoFault); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := (&pipeline.Relay{DB: iso.env.Producer, Broker: iso.env.Broker}).Relay(ctx, pipeline.RelayOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := (&pipeline.Consumer{DB: iso.env.Consumer, Broker: iso.env.Broker}).Consume(ctx, pipeline.ConsumeOptions{Consumer: "accounting", Worker: "w"}); err != nil {
				t.Fatal(err)
			}
			if err := tc.tamper(ctx, iso); err != nil {
				t.Fatal(err)
			}
			_, vs, err := pipeline.CheckHistory(ctx, iso.env.Producer, iso.env.Consumer, iso.env.Broker, "accounting")
			if err != nil {
				t.Fatal(err)
			}
			if tc.invariant == "" {
				if len(vs) > 0 {
					t.Fatalf("a clean history has violations: %v", vs)
				}
				return
			}
			if len(vs) == 0 || !strings.HasPrefix(vs[0].String(), tc.invariant+": ") {
				t.Fatalf("want a %q violation, got %v", tc.invariant, vs)
			}
		})
	}
}

// TestSoakReplaysExactlyWithOneWorker: the same seed injects the same faults
// and the run takes the same course.
func TestSoakReplaysExactlyWithOneWorker(t *testing.T) {
	tp := testParams(t)
	run := func() *SoakReport {
		rep, err := Soak(t.Context(), SoakParams{Events: 200, Faults: 0.3, Seed: 5, Workers: 1, Batch: 10, PGURL: tp.PGURL, Redis: tp.RedisURL})
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
