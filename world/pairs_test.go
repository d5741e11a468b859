package world

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
	p := testConfig(t)
	w, err := Open(ctx, &p, redisOnly)
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
	cfg.Database = pair.iso.Producer
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
	if err := w.admins[producerSide].QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname IN ($1, $2)", pair.iso.Producer, pair.iso.Consumer).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after DiscardPair: %d of the pair's databases left (%v)", left, err)
	}
	next, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		t.Fatal(err)
	}
	if next.iso.Producer == pair.iso.Producer {
		t.Fatalf("the discarded pair %s came back", next.iso.Producer)
	}
	if err := w.ReturnPair(ctx, next); err != nil {
		t.Fatal(err)
	}
}

// A CREATE DATABASE the run's end interrupts is seen through and dropped
// with the rest: one the server committed after the client gave up was
// left behind, with no drop registered (2 runs in 12 left half a pair).
// The creation is held on the template's lock (a transaction commenting
// on template0) while its context is cancelled.
func TestAnInterruptedCreateDatabaseIsDropped(t *testing.T) {
	ctx := t.Context()
	p := testConfig(t)
	w, err := Open(ctx, &p, redisOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if w.managed {
		t.Skip("a managed server's databases go with its data dir")
	}
	holder, err := pgx.Connect(ctx, w.pgURLs[producerSide])
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, "BEGIN; COMMENT ON DATABASE template0 IS NULL"); err != nil {
		t.Fatal(err)
	}
	name := namePrefix + "_" + w.RunID + "_interrupted"
	cctx, cancel := context.WithCancel(ctx)
	var undo cleanups
	done := make(chan error, 1)
	go func() { done <- w.createDB(cctx, producerSide, name, &undo) }()
	time.Sleep(200 * time.Millisecond) // CREATE DATABASE waits for the lock
	cancel()
	time.Sleep(200 * time.Millisecond)
	if _, err := holder.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Error("createDB after its context ended: no error, want the context's")
	}
	exists := func() bool {
		var n int
		if err := w.admins[producerSide].QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !exists() {
		t.Fatal("the interrupted CREATE DATABASE did not run to its end")
	}
	if err := undo.run(); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Errorf("database %s left behind: no drop registered for an interrupted creation", name)
	}
}
