package jetstream

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	"github.com/outboxdrill/runner/broker/jetstream/natsserver"
	"github.com/outboxdrill/runner/internal/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// connect reaches the NATS server of the tests (testservers.Broker).
func connect(t *testing.T) jetstream.JetStream {
	t.Helper()
	url := testservers.Broker(t, Kind)
	absent := func(err error) {
		t.Helper()
		testservers.Absent(t, fmt.Errorf("no NATS server with JetStream at %s: %w", url, err))
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		absent(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(testCtx(t))
	}
	if err != nil {
		absent(err)
	}
	return js
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// uniqueName is a runner-style name ("outboxdrill:RUNID:N"), unique per test.
func uniqueName(t *testing.T) string {
	return "outboxdrill:test-" + rand.Text()[:10] + ":" + sanitize(t.Name())
}

// newStream makes a Stream on a fresh name and deletes it after the test.
func newStream(t *testing.T, js jetstream.JetStream, opt Options) *Stream {
	t.Helper()
	s, err := New(testCtx(t), js, uniqueName(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Delete(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return s
}

func entryIDs(ds []broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func pending(t *testing.T, s *Stream, group string) int64 {
	t.Helper()
	p, err := s.Pending(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return p[group]
}

func TestNameIsSanitized(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{})
	if strings.ContainsAny(s.Name(), ":. ") || !strings.HasPrefix(s.Name(), "outboxdrill_test-") {
		t.Errorf("Name() = %q; want the runner's name with ':' replaced", s.Name())
	}
	ctx := testCtx(t)
	if _, err := s.Read(ctx, "a:b", "w", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "a.b", "w", 1, 0); err == nil || !strings.Contains(err.Error(), "a_b") {
		t.Errorf("second group sanitizing to a_b: err = %v; want a clash naming a_b", err)
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	js := connect(t)
	on := newStream(t, js, Options{Dedupe: true}).Capabilities()
	off := newStream(t, js, Options{}).Capabilities()
	for _, c := range []broker.Capability{broker.EntryLog, broker.PendingCount, broker.Retention, broker.ReplayHistory} {
		if !on.Has(c) || !off.Has(c) {
			t.Errorf("%s not declared", c)
		}
	}
	for _, c := range []broker.Capability{broker.ClaimByIdle, broker.PendingList, broker.SideStore} {
		if on.Has(c) {
			t.Errorf("%s declared", c)
		}
	}
	if !on.Has(broker.BrokerDedupe) || off.Has(broker.BrokerDedupe) {
		t.Errorf("broker_dedupe: with dedupe %v, without %v; want true, false", on.Has(broker.BrokerDedupe), off.Has(broker.BrokerDedupe))
	}
}

func TestPublishReadAck(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{Dedupe: true})
	ctx := testCtx(t)
	ids := brokertest.Publish(t, s, "e1", "e2", "e3")
	if want := []string{"1", "2", "3"}; !slices.Equal(ids, want) {
		t.Fatalf("Publish ids = %v; want %v", ids, want)
	}
	ds, err := s.Read(ctx, "g", "w1", 0, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := []broker.Delivery{
		{ID: "1", EventID: "e1", Payload: brokertest.Messages("e1")[0].Payload, Deliveries: 1},
		{ID: "2", EventID: "e2", Payload: brokertest.Messages("e2")[0].Payload, Deliveries: 1},
		{ID: "3", EventID: "e3", Payload: brokertest.Messages("e3")[0].Payload, Deliveries: 1},
	}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Fatalf("Read (-want +got):\n%s", diff)
	}
	if n := pending(t, s, "g"); n != 3 {
		t.Errorf("pending after read = %d; want 3", n)
	}
	if err := s.Ack(ctx, "g", ids...); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, s, "g"); n != 0 {
		t.Errorf("pending after ack = %d; want 0", n)
	}
	if err := s.Ack(ctx, "g", "2"); err != nil {
		t.Errorf("second ack of 2: %v; want a no-op, as XACK", err)
	}
	if err := s.Ack(ctx, "g", "99", "x"); err == nil || !strings.Contains(err.Error(), "99, x") {
		t.Errorf("ack of unknown ids: %v; want an error naming 99, x", err)
	}
	if again, err := s.Read(ctx, "g", "w1", 0, 0); err != nil || len(again) != 0 {
		t.Errorf("second read = %v, %v; want nothing", again, err)
	}
	if evs, err := s.Events(ctx); err != nil || !slices.Equal(evs, []string{"e1", "e2", "e3"}) {
		t.Errorf("Events = %v, %v; want [e1 e2 e3]", evs, err)
	}
}

func TestReadCountAndLateGroup(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{})
	ctx := testCtx(t)
	brokertest.Publish(t, s, "e1", "e2", "e3")
	first, err := s.Read(ctx, "g", "w", 2, time.Second)
	if err != nil || !slices.Equal(brokertest.EventIDs(first), []string{"e1", "e2"}) {
		t.Fatalf("Read count 2 = %v, %v; want e1 e2", brokertest.EventIDs(first), err)
	}
	rest, err := s.Read(ctx, "g", "w", 2, time.Second)
	if err != nil || !slices.Equal(brokertest.EventIDs(rest), []string{"e3"}) {
		t.Fatalf("second Read = %v, %v; want e3", brokertest.EventIDs(rest), err)
	}
	late, err := s.Read(ctx, "late", "w", 0, time.Second)
	if err != nil || len(late) != 3 {
		t.Errorf("late group Read = %v, %v; want all three (history)", brokertest.EventIDs(late), err)
	}
}

func TestDedupe(t *testing.T) {
	t.Parallel()
	js := connect(t)
	for _, tc := range []struct {
		dedupe  bool
		ids     []string
		entries int64
	}{{true, []string{"1", "1"}, 1}, {false, []string{"1", "2"}, 2}} {
		t.Run(strconv.FormatBool(tc.dedupe), func(t *testing.T) {
			s := newStream(t, js, Options{Dedupe: tc.dedupe})
			// Two publishes, as a relay that crashed before marking would.
			ids := append(brokertest.Publish(t, s, "e1"), brokertest.Publish(t, s, "e1")...)
			if !slices.Equal(ids, tc.ids) {
				t.Errorf("ids = %v; want %v", ids, tc.ids)
			}
			if n, err := s.Entries(testCtx(t)); err != nil || n != tc.entries {
				t.Errorf("Entries = %d, %v; want %d", n, err, tc.entries)
			}
		})
	}
}

// readTwo publishes e1 and e2 on a stream with ackWait and reads both as
// w1 of group g.
func readTwo(t *testing.T, ackWait time.Duration) (*Stream, []broker.Delivery) {
	t.Helper()
	s := newStream(t, connect(t), Options{AckWait: ackWait})
	brokertest.Publish(t, s, "e1", "e2")
	ds, err := s.Read(testCtx(t), "g", "w1", 0, time.Second)
	if err != nil || len(ds) != 2 {
		t.Fatalf("Read = %v, %v; want e1 and e2", ds, err)
	}
	return s, ds
}

func TestClaimAfterAckWait(t *testing.T) {
	t.Parallel()
	const ackWait = 300 * time.Millisecond
	s, ds := readTwo(t, ackWait)
	ctx := testCtx(t)
	if err := s.Ack(ctx, "g", ds[0].ID); err != nil {
		t.Fatal(err)
	}
	// w1 dies holding e2: the server delivers it again once AckWait is out.
	if err := s.Crash(ctx, "g", "w1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	claimed, err := s.Claim(ctx, "g", "w2", 0, 10)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	want := []broker.Delivery{{ID: ds[1].ID, EventID: "e2", Payload: brokertest.Messages("e2")[0].Payload, Deliveries: 2}}
	if diff := cmp.Diff(want, claimed); diff != "" {
		t.Errorf("Claim (-want +got):\n%s", diff)
	}
	if took > ackWait+claimMargin+500*time.Millisecond {
		t.Errorf("Claim took %v; want about AckWait (%v)", took, ackWait)
	}
	st, err := s.PendingStats(ctx)
	if err != nil || st.Redeliveries != 1 {
		t.Errorf("PendingStats = %+v, %v; want 1 redelivery", st, err)
	}
	if n := pending(t, s, "g"); n != 1 {
		t.Errorf("pending after Claim = %d; want 1 (e2)", n)
	}
	if err := s.Ack(ctx, "g", claimed[0].ID); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, s, "g"); n != 0 {
		t.Errorf("pending = %d; want 0", n)
	}
	start = time.Now()
	if none, err := s.AutoClaim(ctx, "g", "w2", 0, 0); err != nil || len(none) != 0 || time.Since(start) > 200*time.Millisecond {
		t.Errorf("AutoClaim with nothing pending = %v, %v after %v; want nothing at once", none, err, time.Since(start))
	}
}

// The probe: after AckWait a plain pull gets the redelivery. No
// verdict may come from the adapter holding it back.
func TestAPullGetsTheRedelivery(t *testing.T) {
	t.Parallel()
	const ackWait = 200 * time.Millisecond
	s := newStream(t, connect(t), Options{AckWait: ackWait})
	ctx := testCtx(t)
	brokertest.Publish(t, s, "e1")
	if ds, err := s.Read(ctx, "g", "w1", 1, time.Second); err != nil || len(ds) != 1 {
		t.Fatalf("Read = %v, %v", ds, err)
	}
	time.Sleep(ackWait + 100*time.Millisecond)
	ds, err := s.Read(ctx, "g", "w1", 0, time.Second)
	if err != nil || len(ds) != 1 || ds[0].EventID != "e1" || ds[0].Deliveries != 2 {
		t.Fatalf("Read after AckWait = %+v, %v; want e1, second delivery", ds, err)
	}
	if err := s.Ack(ctx, "g", ds[0].ID); err != nil {
		t.Fatal(err)
	}
}

// The message to ack is client state, as in any JetStream client: a
// restarted worker (a new connection) cannot ack what the dead one
// pulled, and the server delivers it again after AckWait.
func TestARestartedWorkerLosesItsHandles(t *testing.T) {
	t.Parallel()
	const ackWait = 200 * time.Millisecond
	s := newStream(t, connect(t), Options{AckWait: ackWait})
	ctx := testCtx(t)
	brokertest.Publish(t, s, "e1")
	ds, err := s.Read(ctx, "g", "w", 1, time.Second)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Read = %v, %v", ds, err)
	}
	again, err := New(ctx, connect(t), s.name, Options{AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Ack(ctx, "g", ds[0].ID); err == nil {
		t.Fatal("the restarted worker acked a message it never received")
	}
	got, err := again.Read(ctx, "g", "w", 1, 2*time.Second)
	if err != nil || len(got) != 1 || got[0].ID != ds[0].ID || got[0].Deliveries != 2 {
		t.Fatalf("Read after the restart = %+v, %v; want %s delivered again", got, err, ds[0].ID)
	}
	if err := again.Ack(ctx, "g", got[0].ID); err != nil {
		t.Fatal(err)
	}
}

func TestTrim(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{})
	ctx := testCtx(t)
	ids := brokertest.Publish(t, s, "e1", "e2", "e3", "e4", "e5")
	if ds, err := s.Read(ctx, "early", "w", 0, 0); err != nil || len(ds) != 5 {
		t.Fatalf("Read = %v, %v; want 5", ds, err)
	}
	dropped, err := s.Trim(ctx, 2)
	if err != nil || dropped != 3 {
		t.Fatalf("Trim(2) = %d, %v; want 3 dropped", dropped, err)
	}
	if n, err := s.Entries(ctx); err != nil || n != 2 {
		t.Errorf("Entries = %d, %v; want 2", n, err)
	}
	if evs, err := s.Events(ctx); err != nil || !slices.Equal(evs, []string{"e4", "e5"}) {
		t.Errorf("Events = %v, %v; want [e4 e5]", evs, err)
	}
	ds, err := s.Read(ctx, "late", "w", 0, time.Second)
	if err != nil || !slices.Equal(brokertest.EventIDs(ds), []string{"e4", "e5"}) || !slices.Equal(entryIDs(ds), []string{"4", "5"}) {
		t.Errorf("Read after trim = %v %v, %v; want e4 e5 at 4 5", entryIDs(ds), brokertest.EventIDs(ds), err)
	}
	// Acking entries trimmed away is no error, as XACK's is not.
	if err := s.Ack(ctx, "early", ids...); err != nil {
		t.Errorf("Ack after trim: %v", err)
	}
	if n := pending(t, s, "early"); n != 0 {
		t.Errorf("pending = %d; want 0", n)
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{})
	ctx := testCtx(t)
	want := []broker.DeadLetter{
		{EventID: "e1", Payload: "p1", Reason: "failed: boom", EntryID: "1", Deliveries: 5},
		{EventID: "e2", Payload: "", Reason: "conflict: x", EntryID: "7", Deliveries: 3},
	}
	for _, dl := range want {
		if err := s.DeadLetter(ctx, dl); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.DeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DeadLetters (-want +got):\n%s", diff)
	}
	taken, err := s.TakeDeadLetters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, taken); diff != "" {
		t.Errorf("TakeDeadLetters (-want +got):\n%s", diff)
	}
	if left, err := s.DeadLetters(ctx); err != nil || len(left) != 0 {
		t.Errorf("after Take: %v, %v; want none", left, err)
	}
}

func TestDeleteRemovesOnlyItsOwn(t *testing.T) {
	t.Parallel()
	js := connect(t)
	ctx := testCtx(t)
	s := newStream(t, js, Options{})
	// A neighbour whose names extend ours must survive.
	other, err := New(ctx, js, s.Name()+"_x", Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Delete(context.Background()) })
	brokertest.Publish(t, s, "e1")
	if _, err := s.Read(ctx, "g", "w", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(ctx, broker.DeadLetter{EventID: "e1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{s.Name(), s.dlqName()} {
		if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s after Delete: %v; want not found", name, err)
		}
	}
	for _, name := range []string{other.Name(), other.dlqName()} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("neighbour %s after Delete: %v", name, err)
		}
	}
	if err := s.Delete(ctx); err != nil {
		t.Errorf("second Delete: %v; want nothing to do", err)
	}
}

func TestReadBlocksAtMostBlock(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{})
	ctx := testCtx(t)
	// A first read creates the group's consumer: not part of any wait.
	if _, err := s.Read(ctx, "g", "w", 10, 0); err != nil {
		t.Fatal(err)
	}
	for _, block := range []time.Duration{0, 300 * time.Millisecond} {
		start := time.Now()
		ds, err := s.Read(ctx, "g", "w", 10, block)
		took := time.Since(start)
		if err != nil || len(ds) != 0 {
			t.Errorf("Read on empty stream = %v, %v", ds, err)
		}
		if took < block-20*time.Millisecond || took > block+500*time.Millisecond {
			t.Errorf("Read with block %v took %v", block, took)
		}
	}
	// A message published while Read waits ends the wait, though the
	// batch is not full.
	go func() {
		time.Sleep(200 * time.Millisecond)
		_, _ = s.Publish(context.Background(), brokertest.Messages("late"))
	}()
	start := time.Now()
	ds, err := s.Read(ctx, "g", "w", 10, 5*time.Second)
	if err != nil || len(ds) != 1 || ds[0].EventID != "late" {
		t.Fatalf("Read = %v, %v; want the late event", ds, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Read took %v for a message published after 200ms", took)
	}
}

func TestManyEntries(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{Dedupe: true})
	ctx := testCtx(t)
	const n = 3000 // past the server's default MaxAckPending (1000)
	want := make([]string, n)
	for i := range want {
		want[i] = "e" + strconv.Itoa(i)
	}
	start := time.Now()
	brokertest.Publish(t, s, want...)
	t.Logf("published %d in %v", n, time.Since(start))
	start = time.Now()
	evs, err := s.Events(ctx)
	if err != nil || !slices.Equal(evs, want) {
		t.Fatalf("Events: %d ids, %v; want e0..e%d in order", len(evs), err, n-1)
	}
	t.Logf("Events in %v", time.Since(start))
	start = time.Now()
	ds, err := s.Read(ctx, "g", "w", 0, time.Second)
	if err != nil || !slices.Equal(brokertest.EventIDs(ds), want) {
		t.Fatalf("Read all: %d deliveries, %v; want %d in order", len(ds), err, n)
	}
	t.Logf("Read all in %v", time.Since(start))
	if p := pending(t, s, "g"); p != n {
		t.Errorf("pending = %d; want %d", p, n)
	}
}

// TestConformance runs the suite every broker passes.
func TestConformance(t *testing.T) {
	t.Parallel()
	js := connect(t)
	brokertest.Run(t, Kind, func(t *testing.T, _ ...string) broker.Broker {
		return newStream(t, js, Options{Dedupe: true})
	})
}

// The broker-native DLQ: with MaxDeliver the server stops delivering a
// message on its last delivery without an ack and announces it; the
// advisory, kept in a stream, lists as a dead letter beside the
// application's, naming the server as the one that set it aside.
func TestMaxDeliverDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	s := newStream(t, connect(t), Options{MaxDeliver: 2})
	brokertest.Publish(t, s, "e1")
	if err := s.DeadLetter(ctx, broker.DeadLetter{EventID: "app", Payload: "{}", Reason: "poison", EntryID: "9", Deliveries: 3}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		ds, err := s.Read(ctx, "g", "w", 1, time.Second)
		if err != nil || len(ds) != 1 || ds[0].Deliveries != i {
			t.Fatalf("delivery %d: %+v, %v", i, ds, err)
		}
		if err := s.Nack(ctx, "g", ds[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	// The server refuses the third delivery, and says so.
	if ds, err := s.Read(ctx, "g", "w", 1, 300*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("a third delivery: %+v, %v; want none", ds, err)
	}
	var dls []broker.DeadLetter
	var err error
	for deadline := time.Now().Add(5 * time.Second); len(dls) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if dls, err = s.DeadLetters(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(dls) != 2 || dls[0].EventID != "app" || dls[1].EventID != "e1" || !strings.HasPrefix(dls[1].Reason, "broker: max deliveries") || dls[1].Deliveries != 2 {
		t.Fatalf("dead letters %+v; want the application's, then e1 set aside by the server after 2 deliveries", dls)
	}
	if taken, err := s.TakeDeadLetters(ctx); err != nil || len(taken) != 2 {
		t.Fatalf("take = %+v, %v", taken, err)
	}
	if left, err := s.DeadLetters(ctx); err != nil || len(left) != 0 {
		t.Errorf("after take: %+v, %v; want none", left, err)
	}
}

// A message whose AckWait runs out again while a claim waits comes back in
// that claim as a delivery of its own, with the server's count: the claim
// must not fold it into the first (a worker would handle it twice, and a
// history reading one delivery would miss the second). Each delivery is
// then settled with its own message.
func TestARedeliveryWithinOneClaimIsADeliveryOfItsOwn(t *testing.T) {
	t.Parallel()
	const ackWait = 400 * time.Millisecond
	s, ds := readTwo(t, ackWait)
	ctx := testCtx(t)
	// w1 abandons e1 and keeps working on e2 (InProgress restarts its
	// AckWait), so the claim below waits for e2 to its end, and e1's
	// AckWait runs out twice meanwhile.
	stop := inProgress(t, s, "g", ds[1].ID, ackWait/8)
	defer stop()
	time.Sleep(ackWait * 9 / 10)
	claimed, err := s.Claim(ctx, "g", "w2", 0, 0)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	var counts []int
	for _, d := range claimed {
		if d.EventID != "e1" {
			t.Fatalf("claimed %+v; only e1 was abandoned", claimed)
		}
		counts = append(counts, d.Deliveries)
	}
	if len(counts) < 2 || counts[0] != 2 || !increasing(counts) {
		t.Fatalf("the claim got e1 with delivery counts %v; want each redelivery on its own (2, 3, …)", counts)
	}
	for range counts {
		if err := s.Ack(ctx, "g", ds[0].ID); err != nil {
			t.Fatalf("ack of one delivery of e1: %v", err)
		}
	}
	if n := pending(t, s, "g"); n != 1 {
		t.Errorf("pending after acking e1 = %d; want 1 (e2)", n)
	}
}

// inProgress tells the server, every interval until stop, that the worker
// holding entry id of group is still working on it.
func inProgress(t *testing.T, s *Stream, group, id string, interval time.Duration) (stop func()) {
	t.Helper()
	seq, _ := strconv.ParseUint(id, 10, 64)
	s.mu.Lock()
	msg := s.groups[group].handles[seq][0].msg
	s.mu.Unlock()
	done := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(interval):
				if err := msg.InProgress(); err != nil {
					t.Errorf("in progress: %v", err)
					return
				}
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

func increasing(xs []int) bool {
	for i := 1; i < len(xs); i++ {
		if xs[i] <= xs[i-1] {
			return false
		}
	}
	return true
}

// A Nack returns once the server has the Nak: the very next pull gets the
// entry again, ahead of the ones after it, every time (a Nak only
// published may still be on its way when that pull arrives).
func TestANackIsInPlaceBeforeTheNextPull(t *testing.T) {
	t.Parallel()
	s := newStream(t, connect(t), Options{AckWait: time.Minute})
	ctx := testCtx(t)
	brokertest.Publish(t, s, "e1", "e2")
	for i := 1; i <= 20; i++ {
		ds, err := s.Read(ctx, "g", "w1", 1, time.Second)
		if err != nil || len(ds) != 1 || ds[0].EventID != "e1" || ds[0].Deliveries != i {
			t.Fatalf("read %d = %+v, %v; want e1, delivery %d", i, ds, err, i)
		}
		if err := s.Nack(context.Background(), "g", ds[0].ID); err != nil {
			t.Fatal(err)
		}
	}
}

// After its server stopped, the connection's Down returns once the client
// knows, and a publish then fails at once instead of waiting for a PubAck
// that went down with the connection.
func TestAPublishAfterDownFailsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv, err := natsserver.Start(ctx, natsserver.Options{})
	if err != nil {
		testservers.Absent(t, err)
	}
	t.Cleanup(func() { _ = srv.Discard(context.Background()) })
	var h testservers.Host
	t.Cleanup(h.Close)
	c, err := Kind.Open(ctx, &h, srv.URL(), srv)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.New(ctx, uniqueName(t), broker.Scenario{Consumers: []string{"g"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Halt(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.(broker.Downer).Down(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := b.Publish(ctx, brokertest.Messages("e1")); err == nil || time.Since(start) > time.Second {
		t.Fatalf("publish with the server down: %v after %v; want an error at once", err, time.Since(start))
	}
}

// A publish while the server is down says so: nats.go's own words are
// about a buffer the runner's client does not keep.
func TestAPublishWhileDownSaysTheServerDoesNotAnswer(t *testing.T) {
	t.Parallel()
	err := unreachable(fmt.Errorf("publish: %w", nats.ErrReconnectBufExceeded))
	if !errors.Is(err, nats.ErrReconnectBufExceeded) || !strings.Contains(err.Error(), "the NATS server does not answer") {
		t.Errorf("got %v", err)
	}
	if other := errors.New("nats: timeout"); unreachable(other) != other {
		t.Error("another error is changed")
	}
}
