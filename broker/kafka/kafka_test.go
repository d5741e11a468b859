package kafka

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	"github.com/outboxdrill/runner/internal/testservers"
)

func TestMain(m *testing.M) {
	testservers.Parallel(8) // the tests mostly wait: on sessions, on a poll's block
	testservers.Main(m)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newTopic makes a Topic on a fresh name on the tests' server and deletes
// it after the test. The session is short, as the runner's own server
// allows.
func newTopic(t *testing.T, opt Options) *Topic {
	t.Helper()
	seeds, err := Seeds(testservers.Broker(t, Kind))
	if err != nil {
		t.Fatal(err)
	}
	if opt.Session == 0 {
		opt.Session = time.Second
	}
	tp, err := New(testCtx(t), seeds, "outboxdrill:test-"+rand.Text()[:10], opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tp.Delete(context.Background()); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	return tp
}

func TestConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, Kind, func(t *testing.T, _ ...string) broker.Broker { return newTopic(t, Options{}) })
}

func read(t *testing.T, tp *Topic, worker string) []string {
	t.Helper()
	ds, err := tp.Read(testCtx(t), "g", worker, 0, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return brokertest.EventIDs(ds)
}

// An uncommitted record comes back with the whole tail after it: the group
// has a position, not acknowledgements.
func TestAnUncommittedRecordBringsBackTheTail(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	ids := brokertest.Publish(t, tp, "e1", "e2", "e3")
	if got := read(t, tp, "w"); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("read %v", got)
	}
	// e1 held, e2 and e3 acked: nothing may be committed past e1.
	if err := tp.Ack(testCtx(t), "g", ids[1], ids[2]); err != nil {
		t.Fatal(err)
	}
	if err := tp.Crash(testCtx(t), "g", "w"); err != nil {
		t.Fatal(err)
	}
	// The same worker restarted (same static member) gets e1 and the tail.
	if got := read(t, tp, "w"); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Fatalf("after the restart: %v; want e1 e2 e3 again", got)
	}
}

// A nack seeks back: the failed record and everything after it again.
func TestNackSeeksBack(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	ids := brokertest.Publish(t, tp, "e1", "e2", "e3")
	read(t, tp, "w")
	if err := tp.Ack(testCtx(t), "g", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := tp.Nack(testCtx(t), "g", ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := read(t, tp, "w"); !slices.Equal(got, []string{"e2", "e3"}) {
		t.Fatalf("after nack of e2: %v; want e2 e3", got)
	}
}

// A worker that died without leaving keeps its partition for the session;
// then another worker gets everything after the committed offset.
func TestADeadMembersPartitionMovesAfterTheSession(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Session: time.Second})
	ids := brokertest.Publish(t, tp, "e1", "e2")
	read(t, tp, "dead")
	if err := tp.Ack(testCtx(t), "g", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := tp.Crash(testCtx(t), "g", "dead"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ds, err := tp.Claim(testCtx(t), "g", "alive", 0, 0)
	if err != nil || !slices.Equal(brokertest.EventIDs(ds), []string{"e2"}) {
		t.Fatalf("claim: %v, %v; want e2", brokertest.EventIDs(ds), err)
	}
	t.Logf("the partition moved after %s (session %s)", time.Since(start).Round(time.Millisecond), tp.opt.Session)
}

// A live worker keeps its partition: a claim by another gets nothing (it
// has seen the group settle with the partition where it was), and the
// owner still has its unacked records.
func TestALiveMembersPartitionStays(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Session: time.Second})
	brokertest.Publish(t, tp, "e1")
	if got := read(t, tp, "owner"); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("owner read %v", got)
	}
	ds, err := tp.Claim(testCtx(t), "g", "taker", 0, 0)
	if err != nil || len(ds) != 0 {
		t.Fatalf("claim from a live owner: %v, %v; want nothing", brokertest.EventIDs(ds), err)
	}
	brokertest.Publish(t, tp, "e2")
	if got := read(t, tp, "owner"); !slices.Equal(got, []string{"e2"}) {
		t.Errorf("the owner read %v after the claim; want e2 (its partition stayed)", got)
	}
}

func TestShareGroupConformance(t *testing.T) {
	t.Parallel()
	brokertest.Run(t, Kind, func(t *testing.T, _ ...string) broker.Broker { return newTopic(t, Options{Share: true}) })
}

// A released record comes back to any member with its delivery counted.
func TestShareGroupReleaseCountsTheDelivery(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Share: true})
	ids := brokertest.Publish(t, tp, "e1")
	first, err := tp.Read(testCtx(t), "g", "w1", 0, time.Second)
	if err != nil || len(first) != 1 || first[0].Deliveries != 1 {
		t.Fatalf("read: %+v, %v", first, err)
	}
	if err := tp.Nack(testCtx(t), "g", ids[0]); err != nil {
		t.Fatal(err)
	}
	again, err := tp.Claim(testCtx(t), "g", "w2", 0, 0)
	if err != nil || len(again) != 1 || again[0].EventID != "e1" || again[0].Deliveries != 2 {
		t.Fatalf("after release, w2 got %+v, %v; want e1 on its second delivery", again, err)
	}
}

// Acks above a held record are remembered: once the held record is acked
// too, the commit moves past all of them, so nothing acked comes back.
func TestAcksAboveAHeldRecordAreRemembered(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	ids := brokertest.Publish(t, tp, "e1", "e2", "e3")
	read(t, tp, "w")
	if err := tp.Ack(testCtx(t), "g", ids[1], ids[2]); err != nil { // e1 still held
		t.Fatal(err)
	}
	if err := tp.Ack(testCtx(t), "g", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := tp.Crash(testCtx(t), "g", "w"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, tp, "w"); len(got) != 0 {
		t.Fatalf("after acking e1, e2 and e3 and a restart: %v came back; want nothing (the commit must be past e3)", got)
	}
}

// An ack of a record no member holds (acked already) acknowledges
// nothing, and says so: the caller must not report it acked.
func TestAnAckOfARecordNobodyHoldsSaysSo(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	ids := brokertest.Publish(t, tp, "e1", "e2")
	read(t, tp, "w")
	if err := tp.Ack(testCtx(t), "g", ids[0]); err != nil {
		t.Fatal(err)
	}
	err := tp.Ack(testCtx(t), "g", ids[0], ids[1])
	var na *broker.NotAcked
	if !errors.As(err, &na) || !slices.Equal(na.IDs, []string{ids[0]}) {
		t.Fatalf("ack of %s again with %s: %v; want a NotAcked naming %s alone", ids[0], ids[1], err, ids[0])
	}
}

// A publish to a broker that died after the client's first produce fails
// (within the 5 s delivery timeout) instead of waiting for the outcome of
// the record in flight forever: an idempotent producer's default, which
// hung the relay step past the scenario's timeout and Ctrl-C.
func TestAPublishAfterTheBrokerDiedFails(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := New(testCtx(t), c.ListenAddrs(), "outboxdrill:test-"+rand.Text()[:10], Options{})
	if err != nil {
		t.Fatal(err)
	}
	brokertest.Publish(t, tp, "e1")
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = tp.Publish(ctx, []broker.Message{{EventID: "e2", Payload: `{"event_id":"e2"}`}})
	if err == nil || ctx.Err() != nil {
		t.Fatalf("publish to a dead broker: %v (context: %v); want its own error, before the context ends", err, ctx.Err())
	}
	t.Logf("%v", err)
}

// labelHost records the label Open gives the run's reports.
type labelHost struct {
	testservers.Host
	label string
}

func (h *labelHost) SetLabel(l string) { h.label = l }

// A kfake given by URL, with kfake's own default cluster id, is labelled
// as the stand-in it is, like the runner's own.
func TestAKfakeGivenByURLIsLabelled(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := &labelHost{}
	defer h.Close()
	if _, err := Kind.Open(testCtx(t), h, "kafka://"+c.ListenAddrs()[0], nil); err != nil {
		t.Fatal(err)
	}
	if h.label != KfakeLabel {
		t.Errorf("label %q, want %q", h.label, KfakeLabel)
	}
}
