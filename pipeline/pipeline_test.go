package pipeline_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/pipeline"
	schema "github.com/outboxdrill/runner/sql"
)

var producerTables = []string{"journal", "ledger_entries", "accounts", "outbox"}

// TestProduceCommitsOrRollsBackAsOne: a transfer's journal row, ledger
// entries, balances and outbox row commit together; with divzero, which
// strikes after the outbox insert, none of them does.
func TestProduceCommitsOrRollsBackAsOne(t *testing.T) {
	w, ctx := newWorld(t), t.Context()
	res, err := w.prod.Produce(ctx, transfer("e1", 100), pipeline.NoFault)
	if err != nil || !res.Committed || res.Failed {
		t.Fatalf("produce: %+v, %v", res, err)
	}
	want := map[string]int64{"journal": 1, "ledger_entries": 2, "accounts": 2, "outbox": 1}
	if got := counts(t, w.prodDB, producerTables...); !maps.Equal(got, want) {
		t.Fatalf("after a commit: %v, want %v", got, want)
	}
	res, err = w.prod.Produce(ctx, transfer("e2", 7), pipeline.DivZero)
	if err != nil || res.Committed || !res.Failed || !strings.Contains(res.Reason, "22012") {
		t.Fatalf("produce with divzero: %+v, %v", res, err)
	}
	if got := counts(t, w.prodDB, producerTables...); !maps.Equal(got, want) {
		t.Fatalf("after a rollback: %v, want %v (unchanged)", got, want)
	}
	if n := count(t, w.prodDB, `SELECT balance FROM accounts WHERE account = 'bob'`); n != 100 {
		t.Errorf("bob's balance is %d after the rollback, want 100", n)
	}
	if _, err := w.prod.Produce(ctx, transfer("e1", 100), pipeline.NoFault); err == nil || !strings.Contains(err.Error(), "already produced") {
		t.Errorf("producing e1 again: want an already-produced error, got %v", err)
	}
}

// TestIsDivZeroReadsTheSQLState: the fault is recognised by PostgreSQL's
// SQLSTATE 22012 through any wrapping, and nothing else is taken for it.
func TestIsDivZeroReadsTheSQLState(t *testing.T) {
	w, ctx := newWorld(t), t.Context()
	_, err := w.prodDB.Exec(ctx, "SELECT 1/0")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Fatalf("SELECT 1/0: want SQLSTATE 22012, got %v", err)
	}
	if !pipeline.IsDivZero(fmt.Errorf("wrapped: %w", err)) {
		t.Error("a wrapped division by zero is not recognised")
	}
	_, other := w.prodDB.Exec(ctx, "SELECT 'x'::int")
	if other == nil || pipeline.IsDivZero(other) || pipeline.IsDivZero(errors.New("division by zero")) {
		t.Errorf("taken for a division by zero: %v", other)
	}
}

// TestRelaySkipMarkPublishesAgain: a relay that crashes after the publish,
// before the mark, leaves the rows unpublished; the next pass publishes
// them again (a duplicate entry, never a loss) and marks them.
func TestRelaySkipMarkPublishesAgain(t *testing.T) {
	w, ctx := newWorld(t), t.Context()
	for _, id := range []string{"e1", "e2"} {
		if _, err := w.prod.Produce(ctx, transfer(id, 5), pipeline.NoFault); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.relay.Relay(ctx, pipeline.RelayOptions{SkipMark: true})
	if err != nil || len(res.Published) != 2 || res.Marked != 0 {
		t.Fatalf("relay with skip_mark: %+v, %v", res, err)
	}
	if n := count(t, w.prodDB, `SELECT count(*) FROM outbox WHERE NOT published`); n != 2 {
		t.Fatalf("%d rows unpublished after skip_mark, want 2", n)
	}
	res, err = w.relay.Relay(ctx, pipeline.RelayOptions{})
	if err != nil || len(res.Published) != 2 || res.Marked != 2 || res.Published[0].EventID != "e1" {
		t.Fatalf("relay again: %+v, %v", res, err)
	}
	if n := count(t, w.prodDB, `SELECT count(*) FROM outbox WHERE NOT published`); n != 0 {
		t.Errorf("%d rows unpublished after the second relay, want 0", n)
	}
	if n, err := w.b.Entries(ctx); err != nil || n != 4 {
		t.Errorf("stream holds %d entries (%v), want 4: each event twice", n, err)
	}
	if res, err := w.relay.Relay(ctx, pipeline.RelayOptions{}); err != nil || len(res.Published) != 0 {
		t.Errorf("a third relay published %+v, %v; want nothing", res, err)
	}
}

// TestConcurrentRelaysAndTheirLease: with SKIP LOCKED each row goes out
// once however many relays race; with only the published flag every relay
// that read before the others marked publishes it.
func TestConcurrentRelaysAndTheirLease(t *testing.T) {
	for lease, want := range map[pipeline.Lease]int64{pipeline.SkipLocked: 3, pipeline.Flag: 6} {
		t.Run(string(lease), func(t *testing.T) {
			w, ctx := newWorld(t), t.Context()
			for _, id := range []string{"e1", "e2", "e3"} {
				if _, err := w.prod.Produce(ctx, transfer(id, 5), pipeline.NoFault); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.relay.RelayConcurrently(ctx, 2, lease, 0); err != nil {
				t.Fatal(err)
			}
			if n, err := w.b.Entries(ctx); err != nil || n != want {
				t.Errorf("stream holds %d entries (%v), want %d", n, err, want)
			}
			if n := count(t, w.prodDB, `SELECT count(*) FROM outbox WHERE NOT published`); n != 0 {
				t.Errorf("%d rows left unpublished", n)
			}
		})
	}
}

var consumeOpt = pipeline.ConsumeOptions{Consumer: "accounting", Worker: "w"}

// consumerState is the inbox rows, the projection's amount and events, and
// the pending entries of the accounting consumer.
func (w *world) consumerState(t *testing.T) [4]int64 {
	t.Helper()
	pending, err := w.b.Pending(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return [4]int64{count(t, w.consDB, `SELECT count(*) FROM inbox`),
		count(t, w.consDB, `SELECT coalesce(sum(amount), 0) FROM projection`),
		count(t, w.consDB, `SELECT coalesce(sum(events), 0) FROM projection`), pending["accounting"]}
}

// TestConsumeDivZeroRollsBackAndLeavesTheEntryPending: the fault strikes
// after the inbox insert; the inbox row and the projection roll back
// together, the entry is not acked, and a claim applies it once.
func TestConsumeDivZeroRollsBackAndLeavesTheEntryPending(t *testing.T) {
	w, ctx := newWorld(t), t.Context()
	w.produceAndRelay(t, transfer("e1", 100))
	opt := consumeOpt
	opt.Fault = pipeline.DivZero
	res, err := w.cons.Consume(ctx, opt)
	if err != nil || len(res.Handled) != 1 || res.Count(pipeline.Failed) != 1 || res.Acked() != 0 {
		t.Fatalf("consume with divzero: %+v, %v", res, err)
	}
	if !strings.Contains(res.Handled[0].Reason, "22012") {
		t.Errorf("reason %q does not name SQLSTATE 22012", res.Handled[0].Reason)
	}
	if got := w.consumerState(t); got != [4]int64{0, 0, 0, 1} {
		t.Fatalf("after the rollback: inbox, amount, events, pending = %v, want [0 0 0 1]", got)
	}
	res, err = w.cons.Claim(ctx, consumeOpt)
	if err != nil || res.Count(pipeline.Applied) != 1 || res.Acked() != 1 || res.Redelivered() != 1 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	if got := w.consumerState(t); got != [4]int64{1, 100, 1, 0} {
		t.Errorf("after the claim: inbox, amount, events, pending = %v, want [1 100 1 0]", got)
	}
}

// TestDuplicateAndConflict: the same event again (its payload spelled
// otherwise) is a duplicate, acked without effect; the same event id with
// another payload is an identity conflict, without effect and not acked.
func TestDuplicateAndConflict(t *testing.T) {
	w, ctx := newWorld(t), t.Context()
	w.produceAndRelay(t, transfer("e1", 100))
	if res, err := w.cons.Consume(ctx, consumeOpt); err != nil || res.Count(pipeline.Applied) != 1 {
		t.Fatalf("consume: %+v, %v", res, err)
	}
	respelled := `{"currency": "USD", "amount": 100, "to": "bob", "from": "alice", "event_id": "e1"}`
	changed := strings.Replace(respelled, "100", "999", 1)
	for _, c := range []struct {
		payload string
		want    pipeline.Outcome
		acked   int
		state   [4]int64
	}{
		{respelled, pipeline.Duplicate, 1, [4]int64{1, 100, 1, 0}},
		{changed, pipeline.Conflict, 0, [4]int64{1, 100, 1, 1}},
	} {
		if _, err := w.b.Publish(ctx, []broker.Message{{EventID: "e1", Payload: c.payload, Republish: true}}); err != nil {
			t.Fatal(err)
		}
		res, err := w.cons.Consume(ctx, consumeOpt)
		if err != nil || len(res.Handled) != 1 || res.Handled[0].Outcome != c.want || res.Acked() != c.acked {
			t.Fatalf("%s: got %+v, %v", c.want, res, err)
		}
		if got := w.consumerState(t); got != c.state {
			t.Errorf("after the %s: inbox, amount, events, pending = %v, want %v", c.want, got, c.state)
		}
	}
}

type seenNowhere struct{}

func (seenNowhere) MarkSeen(context.Context, string) (bool, error) { return true, nil }

// TestClashingOptionsAreRejected: options handle would have to choose
// between are an error, each alone is fine; Consume and Claim refuse them
// before taking any entry.
func TestClashingOptionsAreRejected(t *testing.T) {
	on := map[string]func(*pipeline.ConsumeOptions){
		"Strict":        func(o *pipeline.ConsumeOptions) { o.Strict = true },
		"SplitTx":       func(o *pipeline.ConsumeOptions) { o.SplitTx = true },
		"Seen":          func(o *pipeline.ConsumeOptions) { o.Seen = seenNowhere{} },
		"AckFirst":      func(o *pipeline.ConsumeOptions) { o.AckFirst = true },
		"SkipAck":       func(o *pipeline.ConsumeOptions) { o.SkipAck = true },
		"MaxDeliveries": func(o *pipeline.ConsumeOptions) { o.MaxDeliveries = 2 },
	}
	clashes := [][2]string{{"Strict", "SplitTx"}, {"Strict", "Seen"}, {"Seen", "SplitTx"}, {"AckFirst", "SkipAck"}, {"AckFirst", "MaxDeliveries"}}
	for a := range on {
		for b := range on {
			if a >= b {
				continue
			}
			opt := consumeOpt
			on[a](&opt)
			on[b](&opt)
			clash := slices.ContainsFunc(clashes, func(c [2]string) bool { return c == [2]string{a, b} || c == [2]string{b, a} })
			err := opt.Validate()
			if clash != errors.Is(err, pipeline.ErrClash) || clash != (err != nil) {
				t.Errorf("%s + %s: clash %v, Validate says %v", a, b, clash, err)
			} else if clash && !(strings.Contains(err.Error(), a) && strings.Contains(err.Error(), b)) {
				t.Errorf("%s + %s: the error does not name both: %v", a, b, err)
			}
		}
	}

	w, ctx := newWorld(t), t.Context()
	w.produceAndRelay(t, transfer("e1", 100))
	bad := consumeOpt
	bad.Strict, bad.SplitTx = true, true
	for name, pass := range map[string]func(context.Context, pipeline.ConsumeOptions) (pipeline.ConsumeResult, error){"consume": w.cons.Consume, "claim": w.cons.Claim} {
		if res, err := pass(ctx, bad); !errors.Is(err, pipeline.ErrClash) || len(res.Handled) != 0 {
			t.Errorf("%s with clashing options: %+v, %v", name, res, err)
		}
	}
	if res, err := w.cons.Consume(ctx, consumeOpt); err != nil || res.Count(pipeline.Applied) != 1 || res.Redelivered() != 0 {
		t.Errorf("the entry was taken by a refused pass: %+v, %v", res, err)
	}
}

// A pass that cannot reach its database reads its entries and gives up:
// the error is the step's, and the outcome still says what it read — each
// entry failed, not acked — so a later claim is a redelivery, not a first
// delivery the history never saw.
func TestAPassThatGivesUpSaysWhatItRead(t *testing.T) {
	w, ctx := newWorld(t), t.Context()
	w.produceAndRelay(t, transfer("e1", 100), transfer("e2", 50))
	down := newDB(t, "pipeline_test_down_"+strings.ToLower(rand.Text()[:8]), schema.Consumer)
	down.Close() // as a server that went away
	res, err := (&pipeline.Consumer{DB: down, Broker: w.b}).Consume(ctx, consumeOpt)
	if err == nil || len(res.Handled) != 2 || res.Count(pipeline.Failed) != 2 || res.Acked() != 0 || !strings.Contains(res.Handled[1].Reason, "not handled") {
		t.Fatalf("consume without its database: %+v, %v; want both entries failed, not acked, and the error", res, err)
	}
	res, err = w.cons.Claim(ctx, consumeOpt)
	if err != nil || res.Count(pipeline.Applied) != 2 || res.Redelivered() != 2 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
}
