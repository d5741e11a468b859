package rabbitmq

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	"github.com/outboxdrill/runner/internal/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// dial reaches the RabbitMQ server of the tests (testservers.Broker).
func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	addr := testservers.Broker(t, Kind)
	conn, err := amqp.DialConfig(addr, amqp.Config{Dial: amqp.DefaultDial(3 * time.Second)})
	if err != nil {
		shown := addr
		if u, perr := url.Parse(addr); perr == nil {
			shown = u.Redacted()
		}
		testservers.Absent(t, fmt.Errorf("no RabbitMQ server at %s: %w", shown, err))
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName is a runner-style name ("outboxdrill:RUNID:N"), unique per test.
func uniqueName(t *testing.T) string {
	return "outboxdrill:test-" + rand.Text()[:10] + ":" + strings.ReplaceAll(t.Name(), "/", ".")
}

// newBroker makes a Broker on a fresh name and deletes it after the test.
func newBroker(t *testing.T, conn *amqp.Connection, groups ...string) *Broker {
	t.Helper()
	b, err := New(testCtx(t), conn, uniqueName(t), groups)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Delete(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return b
}

func entryIDs(ds []broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// exists passively declares an exchange or queue on a channel of its own:
// 404 means it is gone.
func exists(t *testing.T, conn *amqp.Connection, queue bool, name string) bool {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if queue {
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	} else {
		err = ch.ExchangeDeclarePassive(name, amqp.ExchangeFanout, true, false, false, false, nil)
	}
	var aerr *amqp.Error
	switch {
	case err == nil:
		return true
	case errors.As(err, &aerr) && aerr.Code == amqp.NotFound:
		return false
	}
	t.Fatalf("passive declare %s: %v", name, err)
	return false
}

func TestPublishReadAckEveryGroupGetsEveryMessage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "ledger", "notifier")
	entries := brokertest.Publish(t, b, "e1", "e2", "e3")
	if slices.Contains(entries, "") || len(slices.Compact(slices.Sorted(slices.Values(entries)))) != 3 {
		t.Fatalf("entry ids not distinct and non-empty: %v", entries)
	}
	for _, g := range []string{"ledger", "notifier"} {
		ds, err := b.Read(ctx, g, "w1", 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"e1", "e2", "e3"}, brokertest.EventIDs(ds)); diff != "" {
			t.Fatalf("%s events (-want +got):\n%s", g, diff)
		}
		if diff := cmp.Diff(entries, entryIDs(ds)); diff != "" {
			t.Errorf("%s entry ids (-want +got):\n%s", g, diff)
		}
		for _, d := range ds {
			if d.Deliveries != 1 || d.Payload != brokertest.Messages(d.EventID)[0].Payload {
				t.Errorf("%s: first delivery %+v", g, d)
			}
		}
		if err := b.Ack(ctx, g, entryIDs(ds)...); err != nil {
			t.Fatal(err)
		}
		// Acked for real: closing every channel (a crash) gives nothing back.
		b.closeWorkers()
		again, err := b.Read(ctx, g, "w2", 0, 500*time.Millisecond)
		if err != nil || len(again) != 0 {
			t.Errorf("%s after ack and crash: read = %v, %v; want nothing", g, again, err)
		}
	}
}

func TestReadTakesAtMostCount(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	brokertest.Publish(t, b, "e1", "e2", "e3", "e4", "e5")
	first, err := b.Read(ctx, "g", "w", 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := b.Read(ctx, "g", "w", 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := [][]string{brokertest.EventIDs(first), brokertest.EventIDs(rest)}; !cmp.Equal(got, [][]string{{"e1", "e2"}, {"e3", "e4", "e5"}}) {
		t.Errorf("reads of 2 then all = %v", got)
	}
}

func TestEventsInPublishOrderAndEntriesCountDuplicates(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	// Enough entries that a queue returning them in map order (a quorum
	// queue does) would scramble them.
	var want []string
	for i := range 60 {
		want = append(want, fmt.Sprintf("e%02d", i))
	}
	brokertest.Publish(t, b, want...)
	// Each browse requeues the log, which must keep its order, also when
	// browsed entries are followed by new ones.
	for i := range 4 {
		if i == 1 {
			brokertest.Publish(t, b, "e01", "e60") // a relay republishing e01: a second entry, same event
			want = append(want, "e01", "e60")
		}
		got, err := b.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("events, browse %d (-want +got):\n%s", i+1, diff)
		}
		n, err := b.Entries(ctx)
		if err != nil || n != int64(len(want)) {
			t.Fatalf("entries after browse %d = %d, %v; want %d", i+1, n, err, len(want))
		}
	}
	// Consumers do not shrink the log.
	ds, err := b.Read(ctx, "g", "w", 0, time.Second)
	if err == nil {
		err = b.Ack(ctx, "g", entryIDs(ds)...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.Entries(ctx); err != nil || n != int64(len(want)) {
		t.Errorf("entries after the group consumed = %d, %v; want %d", n, err, len(want))
	}
}

func TestClaimTakesOverAnUnackedDelivery(t *testing.T) {
	t.Parallel()
	for name, claim := range map[string]func(*Broker) func(context.Context, string, string, time.Duration, int) ([]broker.Delivery, error){
		"Claim": func(b *Broker) func(context.Context, string, string, time.Duration, int) ([]broker.Delivery, error) {
			return b.Claim
		},
		"AutoClaim": func(b *Broker) func(context.Context, string, string, time.Duration, int) ([]broker.Delivery, error) {
			return b.AutoClaim
		},
	} {
		t.Run(name, func(t *testing.T) { testClaim(t, claim) })
	}
}

func testClaim(t *testing.T, claimOf func(*Broker) func(context.Context, string, string, time.Duration, int) ([]broker.Delivery, error)) {
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	claim := claimOf(b)
	brokertest.Publish(t, b, "e1", "e2")
	readOne := func(worker, want string) broker.Delivery {
		t.Helper()
		ds, err := b.Read(ctx, "g", worker, 1, time.Second)
		if err != nil || len(ds) != 1 || ds[0].EventID != want || ds[0].Deliveries != 1 {
			t.Fatalf("%s reads %+v, %v; want %s, first delivery", worker, ds, err, want)
		}
		return ds[0]
	}
	e1 := readOne("A", "e1")
	e2 := readOne("B", "e2") // the claimer holds one of its own
	// A is alive and holds e1: RabbitMQ gives nobody else a delivery a
	// live channel holds, whatever its age.
	if got, err := claim(ctx, "g", "B", 0, 0); err != nil || len(got) != 0 {
		t.Fatalf("claim while A lives = %+v, %v; want nothing", got, err)
	}
	// A's process dies: its channel closes, the broker requeues e1.
	if err := b.Crash(ctx, "g", "A"); err != nil {
		t.Fatal(err)
	}
	got, err := claim(ctx, "g", "B", 0, 0)
	if err != nil || len(got) != 1 || got[0].ID != e1.ID || got[0].Deliveries < 2 {
		t.Fatalf("B claims %+v, %v; want entry %s (e1) delivered >= 2 times", got, err, e1.ID)
	}
	// B's own channel stayed open: it still holds e2.
	if err := b.Ack(ctx, "g", e2.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(ctx, "g", got[0].ID); err != nil {
		t.Fatal(err)
	}
	// Unlike XCLAIM, a claim is a get: with nothing returned it takes what
	// is new.
	brokertest.Publish(t, b, "e3")
	if rest, err := claim(ctx, "g", "D", 0, 0); err != nil || len(rest) != 1 || rest[0].EventID != "e3" || rest[0].Deliveries != 1 {
		t.Errorf("claim with nothing returned = %+v, %v; want the new e3, as a get would", rest, err)
	}
}

// A worker's delivery tags are client state, as in any AMQP client: a
// restarted worker (a new connection) cannot ack what the dead one held,
// and the broker delivers it again.
func TestARestartedWorkerLosesItsHandles(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	first, second := dial(t), dial(t)
	b, err := New(ctx, first, uniqueName(t), []string{"g"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := New(ctx, second, b.Name(), []string{"g"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Delete(context.Background()) })
	brokertest.Publish(t, b, "e1")
	ds, err := b.Read(ctx, "g", "w", 1, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("read = %v, %v", ds, err)
	}
	if err := first.Close(); err != nil { // the process dies
		t.Fatal(err)
	}
	if err := again.Ack(ctx, "g", ds[0].ID); err == nil {
		t.Fatal("the restarted worker acked a delivery it never received")
	}
	got, err := again.Read(ctx, "g", "w", 1, 2*time.Second)
	if err != nil || len(got) != 1 || got[0].ID != ds[0].ID || got[0].Deliveries < 2 {
		t.Fatalf("read after the restart = %+v, %v; want %s redelivered", got, err, ds[0].ID)
	}
	if err := again.Ack(ctx, "g", got[0].ID); err != nil {
		t.Fatal(err)
	}
}

func TestAckOfAnUnknownIDFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	brokertest.Publish(t, b, "e1")
	ds, err := b.Read(ctx, "g", "w", 1, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("read = %v, %v", ds, err)
	}
	id := ds[0].ID
	err = b.Ack(ctx, "g", id, "no-such-entry")
	if err == nil || !strings.Contains(err.Error(), "no-such-entry") || strings.Contains(err.Error(), id) {
		t.Fatalf("ack with an unknown id = %v; want an error naming only no-such-entry", err)
	}
	// The known id was not acked by the failed call: it still can be, once.
	if err := b.Ack(ctx, "g", id, id); err != nil {
		t.Fatalf("ack of the held id (twice in one call) = %v", err)
	}
	if err := b.Ack(ctx, "g", id); err == nil || !strings.Contains(err.Error(), id) {
		t.Errorf("second ack = %v; want an error naming %s", err, id)
	}
}

func TestReadWithNothingReturnsAfterBlock(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	// A first read opens the worker's channel and consumer: not part of
	// any wait.
	if _, err := b.Read(ctx, "g", "w", 10, 0); err != nil {
		t.Fatal(err)
	}
	for _, block := range []time.Duration{0, 300 * time.Millisecond} {
		start := time.Now()
		ds, err := b.Read(ctx, "g", "w", 10, block)
		took := time.Since(start)
		if err != nil || len(ds) != 0 {
			t.Fatalf("read of an empty queue = %v, %v", ds, err)
		}
		if took < block || took > block+time.Second {
			t.Errorf("read blocking %v returned after %v", block, took)
		}
	}
}

func TestDeadLettersRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	want := []broker.DeadLetter{
		{EventID: "e1", Payload: `{"a":1}`, Reason: "failed: division by zero", EntryID: "x-1", Deliveries: 3},
		{EventID: "e2", Payload: `{"a":2}`, Reason: "conflict: payload differs", EntryID: "x-2", Deliveries: 5},
	}
	for _, dl := range want {
		if err := b.DeadLetter(ctx, dl); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 { // listing does not consume
		got, err := b.DeadLetters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("dead letters, listing %d (-want +got):\n%s", i+1, diff)
		}
	}
	got, err := b.TakeDeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("taken (-want +got):\n%s", diff)
	}
	for _, f := range []func(context.Context) ([]broker.DeadLetter, error){b.DeadLetters, b.TakeDeadLetters} {
		if left, err := f(ctx); err != nil || len(left) != 0 {
			t.Errorf("after take: %v, %v; want none", left, err)
		}
	}
}

func TestUnsupportedOperationsSaySo(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	_, err := b.Pending(ctx)
	if !errors.Is(err, broker.ErrUnsupported) || !strings.Contains(err.Error(), string(broker.PendingCount)) {
		t.Errorf("pending = %v; want ErrUnsupported naming %s", err, broker.PendingCount)
	}
	if _, err := b.PendingStats(ctx); !errors.Is(err, broker.ErrUnsupported) {
		t.Errorf("pending stats = %v; want ErrUnsupported", err)
	}
	if _, err := b.Trim(ctx, 1); !errors.Is(err, broker.ErrUnsupported) || !strings.Contains(err.Error(), string(broker.Retention)) {
		t.Errorf("trim = %v; want ErrUnsupported naming %s", err, broker.Retention)
	}
	if diff := cmp.Diff(broker.Capabilities{broker.EntryLog: true, broker.Purge: true, broker.NativeDeadLetter: true, broker.DeliveryCount: true}, b.Capabilities()); diff != "" {
		t.Errorf("capabilities (-want +got):\n%s", diff)
	}
}

// Trim to 0 purges: the entry log and every group queue lose what is
// ready, and the broker says how many entries the log held.
func TestTrimToZeroPurges(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	brokertest.Publish(t, b, "e1", "e2")
	n, err := b.Trim(ctx, 0)
	if err != nil || n != 2 {
		t.Fatalf("trim 0 = %d, %v; want 2 purged from the log", n, err)
	}
	if entries, err := b.Entries(ctx); err != nil || entries != 0 {
		t.Errorf("entries after the purge = %d, %v; want 0", entries, err)
	}
	if ds, err := b.Read(ctx, "g", "w", 0, 0); err != nil || len(ds) != 0 {
		t.Errorf("read after the purge = %v, %v; want nothing", ds, err)
	}
}

func TestLateGroupOnlyGetsLaterPublishes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "early")
	brokertest.Publish(t, b, "e1")
	if ds, err := b.Read(ctx, "late", "w", 0, 0); err != nil || len(ds) != 0 {
		t.Fatalf("first read of a late group = %v, %v; want nothing (no history)", ds, err)
	}
	brokertest.Publish(t, b, "e2")
	ds, err := b.Read(ctx, "late", "w", 0, time.Second)
	if err != nil || !cmp.Equal(brokertest.EventIDs(ds), []string{"e2"}) {
		t.Errorf("late group reads %v, %v; want [e2]", brokertest.EventIDs(ds), err)
	}
}

func TestPublishReturnsTheIDsConfirmedBeforeANack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	conn := dial(t)
	b := newBroker(t, conn, "g")
	// A queue that refuses its second message makes the broker nack it.
	full := b.Name() + ".full"
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer ch.Close()
		if _, err := ch.QueueDelete(full, false, false, false); err != nil {
			t.Errorf("cleanup: delete %s: %v", full, err)
		}
	})
	if err := declareBound(ch, full, b.Name(), amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	ids, err := b.Publish(ctx, brokertest.Messages("e1", "e2", "e3"))
	if !errors.Is(err, ErrNacked) || !strings.Contains(err.Error(), "e2") {
		t.Errorf("publish = %v; want ErrNacked naming e2", err)
	}
	if len(ids) != 1 {
		t.Errorf("confirmed ids = %v; want the first only", ids)
	}
	// A nack means some queue refused it, not that no queue took it.
	if n, err := b.Entries(ctx); err != nil || n != 3 {
		t.Errorf("entries = %d, %v; want 3 (the log took the nacked ones)", n, err)
	}
}

// A message no queue takes is returned (mandatory), not confirmed and
// dropped: the publish fails naming it, and its id is not handed out, so a
// relay never marks it published.
func TestUnroutablePublishFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	conn := dial(t)
	b := newBroker(t, conn, "g")
	brokertest.Publish(t, b, "e1")
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, q := range []string{b.logQueue(), b.groupQueue("g")} { // every queue bound to the exchange
		if err := ch.QueueUnbind(q, "", b.Name(), nil); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := b.Publish(ctx, brokertest.Messages("e2"))
	if !errors.Is(err, ErrUnroutable) || !strings.Contains(err.Error(), "e2") || len(ids) != 0 {
		t.Fatalf("publish with no queue bound = %v, %v; want ErrUnroutable naming e2 and no id", ids, err)
	}
}

func TestChannelErrorsSurface(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	conn := dial(t)
	b := newBroker(t, conn, "g")
	// The channel that deletes the queue and exchange below, opened before
	// the server closes any: a channel opened just after the server closed
	// one may get its id while the server is still closing it, and then
	// the server takes its first method for a connection error (504
	// "expected 'channel.open'"; the client race of streadway/amqp#276).
	other, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	brokertest.Publish(t, b, "e1")
	ds, err := b.Read(ctx, "g", "w", 1, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("read = %v, %v", ds, err)
	}
	// A bad ack makes the server close w's channel (406), requeueing e1.
	b.mu.Lock()
	w := b.workers[workerKey{"g", "w"}]
	b.mu.Unlock()
	if err := w.ch.Ack(999, false); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, w)
	if _, err := b.Read(ctx, "g", "w", 1, 0); err == nil || !strings.Contains(err.Error(), "406") {
		t.Fatalf("read on the closed channel = %v; want the 406", err)
	}
	again, err := b.Read(ctx, "g", "w", 1, time.Second)
	if err != nil || len(again) != 1 || again[0].ID != ds[0].ID || again[0].Deliveries != 2 {
		t.Fatalf("read on a new channel = %+v, %v; want %s redelivered", again, err, ds[0].ID)
	}
	// An ack the server refuses is reported by Ack itself.
	b.mu.Lock()
	w = b.workers[workerKey{"g", "w"}]
	w.held[999] = heldEntry{id: "bogus"}
	b.held[heldKey{"g", "bogus"}] = holder{w, 999}
	b.mu.Unlock()
	if err := b.Ack(ctx, "g", "bogus"); err == nil || !strings.Contains(err.Error(), "406") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("refused ack = %v; want the 406, naming bogus", err)
	}
	// Queue and exchange deleted behind the broker's back: errors, not hangs.
	if _, err := other.QueueDelete(b.groupQueue("g"), false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, "g", "w2", 1, time.Second); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("read of a deleted queue = %v; want a 404", err)
	}
	if err := other.ExchangeDelete(b.Name(), false, false); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.Publish(ctx, brokertest.Messages("e2")); err == nil || len(ids) != 0 || !strings.Contains(err.Error(), "404") {
		t.Errorf("publish to a deleted exchange = %v, %v; want a 404 and no ids", ids, err)
	}
}

func TestClaimTakesWhatADeadChannelGaveBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b := newBroker(t, dial(t), "g")
	brokertest.Publish(t, b, "e1")
	ds, err := b.Read(ctx, "g", "A", 1, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("read = %v, %v", ds, err)
	}
	b.mu.Lock()
	w := b.workers[workerKey{"g", "A"}]
	b.mu.Unlock()
	if err := w.ch.Ack(999, false); err != nil { // the server closes A's channel
		t.Fatal(err)
	}
	waitClosed(t, w)
	// However recent, a delivery whose channel is gone is back in the queue.
	got, err := b.Claim(ctx, "g", "B", time.Hour, 0)
	if err != nil || len(got) != 1 || got[0].ID != ds[0].ID || got[0].Deliveries < 2 {
		t.Fatalf("claim = %+v, %v; want %s redelivered", got, err, ds[0].ID)
	}
}

func waitClosed(t *testing.T, w *worker) {
	t.Helper()
	for start := time.Now(); !w.ch.IsClosed(); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("channel still open after a bad ack")
		}
	}
}

func TestDeleteRemovesEverythingDeclared(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	conn := dial(t)
	b := newBroker(t, conn, "g")
	brokertest.Publish(t, b, "e1")
	if _, err := b.Read(ctx, "late", "w", 0, 0); err != nil { // declares a late group
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, "g", "w", 0, time.Second); err != nil { // holds e1 unacked
		t.Fatal(err)
	}
	if err := b.DeadLetter(ctx, broker.DeadLetter{EventID: "e1"}); err != nil {
		t.Fatal(err)
	}
	queues := b.Queues()
	want := []string{b.Name() + ".log", b.Name() + ".dlq", b.Name() + ".g", b.Name() + ".late"}
	if diff := cmp.Diff(want, queues); diff != "" {
		t.Fatalf("queues (-want +got):\n%s", diff)
	}
	for _, q := range queues {
		if !exists(t, conn, true, q) {
			t.Fatalf("queue %s missing before delete", q)
		}
	}
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if exists(t, conn, true, q) {
			t.Errorf("queue %s still there after delete", q)
		}
	}
	if exists(t, conn, false, b.Name()) {
		t.Errorf("exchange %s still there after delete", b.Name())
	}
}

func TestDeliveriesCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		headers     amqp.Table
		redelivered bool
		want        int
	}{
		{nil, false, 1},
		{nil, true, 2},
		{amqp.Table{"x-delivery-count": int64(0)}, false, 1},
		{amqp.Table{"x-delivery-count": int64(2)}, true, 3},
		{amqp.Table{"x-delivery-count": int32(1)}, true, 2},
		{amqp.Table{"x-delivery-count": int64(0)}, true, 2}, // a count of failures only
	} {
		if got := deliveries(amqp.Delivery{Headers: c.headers, Redelivered: c.redelivered}); got != c.want {
			t.Errorf("deliveries(%v, redelivered %v) = %d; want %d", c.headers, c.redelivered, got, c.want)
		}
	}
}

// TestConformance runs the suite every broker passes.
func TestConformance(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	brokertest.Run(t, Kind, func(t *testing.T, groups ...string) broker.Broker {
		return newBroker(t, conn, groups...)
	})
}

// The broker-native DLQ: with a delivery limit, the broker itself sets a
// message aside on its n-th delivery without an ack, into the dead-letter
// queue beside the application's dead letters, saying so.
func TestDeliveryLimitDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	b, err := New(ctx, dial(t), uniqueName(t), []string{"g"})
	if err != nil {
		t.Fatal(err)
	}
	b.Delete(ctx) // declared without the limit: start again with it
	b, err = NewRecorded(ctx, dial(t), b.Name(), []string{"g"}, nil, WithDeliveryLimit(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Delete(context.Background()) })
	brokertest.Publish(t, b, "e1")
	for i := 1; i <= 2; i++ {
		ds, err := b.Read(ctx, "g", "w", 1, time.Second)
		if err != nil || len(ds) != 1 || ds[0].Deliveries != i {
			t.Fatalf("delivery %d: %+v, %v", i, ds, err)
		}
		if err := b.Nack(ctx, "g", ds[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	var dls []broker.DeadLetter
	for deadline := time.Now().Add(5 * time.Second); len(dls) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if dls, err = b.DeadLetters(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The dead-lettered message carries no delivery count: the adapter
	// reports none (0) rather than the configured limit, and names the limit.
	if len(dls) != 1 || dls[0].EventID != "e1" || !strings.HasPrefix(dls[0].Reason, "broker: delivery_limit") ||
		!strings.Contains(dls[0].Reason, "x-delivery-limit is 2") || dls[0].Deliveries != 0 {
		t.Fatalf("dead letters %+v; want e1 set aside by the broker, the limit in the reason, no invented count", dls)
	}
	if ds, err := b.Read(ctx, "g", "w", 1, 300*time.Millisecond); err != nil || len(ds) != 0 {
		t.Errorf("read after the broker set e1 aside = %+v, %v; want nothing", ds, err)
	}
}
