package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
)

// readInTxn reads e1 as worker in a transaction.
func readInTxn(t *testing.T, tp *Topic, worker string) broker.Txn {
	t.Helper()
	txn, ds, err := tp.ReadInTxn(testCtx(t), "g", worker, 0, time.Second)
	if err != nil || len(ds) != 1 || ds[0].EventID != "e1" {
		t.Fatalf("read in a transaction as %s: %+v, %v; want e1", worker, ds, err)
	}
	return txn
}

// crashIn reads e1 as worker, emits it in the transaction and crashes
// there; it returns when the output was produced: the transaction cannot
// have begun later (the broker starts its timeout at the first output).
func crashIn(t *testing.T, tp *Topic, worker string) time.Time {
	t.Helper()
	txn := readInTxn(t, tp, worker)
	emitted := time.Now()
	if err := txn.Emit(testCtx(t), broker.Delivery{EventID: "e1", Payload: "{}"}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Crash(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return emitted
}

// A worker that dies inside its transaction sends nothing more: the group
// keeps it as a member, its transaction stays open holding the group's
// offsets, and another worker reads only once the broker aborted it at its
// transaction timeout.
func TestATxnCrashKeepsTheMemberAndHoldsTheOffsets(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Session: 2 * time.Second, TxnTimeout: 4 * time.Second})
	brokertest.Publish(t, tp, "e1")
	emitted := crashIn(t, tp, "w1")
	if n, err := tp.groupMembers(testCtx(t), "g"); err != nil || n != 1 {
		t.Errorf("the group has %d member(s) after the crash (%v); want the dead one kept until its session runs out", n, err)
	}
	if open, err := tp.openTxn(testCtx(t), tp.groupID("g")+".w1"); err != nil || !open {
		t.Errorf("the crashed worker's transaction open: %v (%v); want open: nobody ended it", open, err)
	}
	txn := readInTxn(t, tp, "w2")
	if waited := time.Since(emitted); waited < tp.opt.TxnTimeout {
		t.Errorf("w2 read e1 %s after w1's output; the broker aborts w1's transaction only after %s", waited, tp.opt.TxnTimeout)
	}
	notes := strings.Join(txn.Notes(), "\n")
	for _, want := range []string{"joined group", "crashed without leaving", "offsets to become stable"} {
		if !strings.Contains(notes, want) {
			t.Errorf("w2's notes lack %q:\n%s", want, notes)
		}
	}
	t.Logf("w2 read %s after w1's output:\n%s", time.Since(emitted).Round(time.Millisecond), notes)
	if err := txn.Emit(testCtx(t), broker.Delivery{EventID: "e1", Payload: "{}"}); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if out, err := tp.Outputs(testCtx(t)); err != nil || len(out) != 1 {
		t.Errorf("outputs %v, %v; want w2's alone: w1's was aborted", out, err)
	}
}

// The same worker started again fences its crashed self at once (same
// transactional id): it need not wait for the transaction timeout.
func TestARestartedTxnWorkerFencesItsCrashedSelf(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Session: time.Second, TxnTimeout: time.Minute})
	brokertest.Publish(t, tp, "e1")
	crashIn(t, tp, "w1")
	txn := readInTxn(t, tp, "w1")
	if notes := strings.Join(txn.Notes(), "\n"); !strings.Contains(notes, "fenced") {
		t.Errorf("the restarted worker's notes do not say it fenced the open transaction:\n%s", notes)
	}
	if err := txn.Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// A failed entry aborts the transaction as a live worker does: the worker
// stays in the group and reads the entry again in its next transaction.
func TestATxnAbortKeepsTheWorker(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	brokertest.Publish(t, tp, "e1")
	if err := readInTxn(t, tp, "w1").Abort(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := readInTxn(t, tp, "w1").Commit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}
