package runner

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
)

// DiscardPair drops a pair nobody takes next without resetting its rows: a
// session holding a lock that the reset's DELETE would wait for does not
// hold it up (ReturnPair would wait as long as the lock is held), and the
// pool makes a new pair for the next taker.
func TestDiscardPairDropsWithoutReset(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	p := testParams(t)
	w, err := OpenWorld(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	pair, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(w.pgURLs[producerSide])
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = pair.iso.producer
	blocker, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(context.WithoutCancel(ctx))
	if _, err := blocker.Exec(ctx, "BEGIN; LOCK TABLE outbox IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.DiscardPair(ctx, pair) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("DiscardPair waited on the outbox lock: it reset the rows before the drop")
	}
	var left int
	if err := w.admins[producerSide].QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname IN ($1, $2)", pair.iso.producer, pair.iso.consumer).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after DiscardPair: %d of the pair's databases left (%v)", left, err)
	}
	next, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		t.Fatal(err)
	}
	if next.iso.producer == pair.iso.producer {
		t.Fatalf("the discarded pair %s came back", next.iso.producer)
	}
	if err := w.ReturnPair(ctx, next); err != nil {
		t.Fatal(err)
	}
}
