package kafka

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
)

// fates reads what the broker says of group g's entries, by event id.
func fates(t *testing.T, tp *Topic) map[string]broker.GroupEntry {
	t.Helper()
	es, ok, err := tp.Reach(testCtx(t), "g")
	if err != nil || !ok {
		t.Fatalf("reach: ok %v, %v", ok, err)
	}
	out := map[string]broker.GroupEntry{}
	for _, e := range es {
		out[e.EventID] = e
	}
	return out
}

func readOne(t *testing.T, tp *Topic, worker, want string) broker.Delivery {
	t.Helper()
	ds, err := tp.Read(testCtx(t), "g", worker, 1, time.Second)
	if err != nil || len(ds) != 1 || ds[0].EventID != want {
		t.Fatalf("read as %s: %+v, %v; want %s", worker, ds, err, want)
	}
	return ds[0]
}

func readAll(t *testing.T, tp *Topic) []broker.Delivery {
	t.Helper()
	ds, err := tp.Read(testCtx(t), "g", "w", 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// A record released as often as the broker's delivery limit allows
// (group.share.delivery.count.limit, 5 by default) is archived: the broker
// says it will never deliver it again, and no read gets it.
func TestShareGroupReachTellsARecordArchivedAtItsDeliveryLimit(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Share: true})
	brokertest.Publish(t, tp, "e1")
	for n := 1; n <= 5; n++ {
		d := readOne(t, tp, "w", "e1")
		if d.Deliveries != n {
			t.Fatalf("delivery %d counted %d", n, d.Deliveries)
		}
		if f := fates(t, tp)["e1"]; f.Fate != broker.Deliverable {
			t.Fatalf("e1 held on its delivery %d: %v (%s); want deliverable", n, f.Fate, f.Why)
		}
		if err := tp.Nack(testCtx(t), "g", d.ID); err != nil {
			t.Fatal(err)
		}
	}
	if ds, err := tp.Read(testCtx(t), "g", "w", 0, 300*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("read after the limit: %+v, %v; want nothing", ds, err)
	}
	if f := fates(t, tp)["e1"]; f.Fate != broker.Finished || !strings.Contains(f.Why, "below the share-partition start offset 1") {
		t.Fatalf("e1 after its 5th release: %v (%s); want finished, below the start offset", f.Fate, f.Why)
	}
}

// What a worker was handed and did not settle, its client accepts at the
// next poll: the broker finished it although the worker never acked it.
func TestShareGroupReachTellsARecordTheNextPollAccepted(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Share: true})
	brokertest.Publish(t, tp, "e1", "e2")
	readOne(t, tp, "w", "e1") // kept: neither acked nor released
	readOne(t, tp, "w", "e2")
	fs := fates(t, tp)
	if fs["e1"].Fate != broker.Finished {
		t.Errorf("e1, kept and then polled past: %v (%s); want finished", fs["e1"].Fate, fs["e1"].Why)
	}
	if fs["e2"].Fate != broker.Deliverable {
		t.Errorf("e2, held: %v (%s); want deliverable", fs["e2"].Fate, fs["e2"].Why)
	}
}

// A record accepted past one still in flight is finished, but the broker
// says only how many past the start offset finished, not which: undecided.
func TestShareGroupReachLeavesOutOfOrderAcceptsUndecided(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Share: true})
	ids := brokertest.Publish(t, tp, "e1", "e2")
	if got := brokertest.EventIDs(readAll(t, tp)); len(got) != 2 {
		t.Fatalf("read %v; want e1 and e2", got)
	}
	if err := tp.Ack(testCtx(t), "g", ids[1]); err != nil {
		t.Fatal(err)
	}
	fs := fates(t, tp)
	if fs["e1"].Fate != broker.Deliverable || fs["e2"].Fate != broker.Undecided || !strings.Contains(fs["e2"].Why, "not which") {
		t.Errorf("e1 %v, e2 %v (%s); want deliverable and undecided", fs["e1"].Fate, fs["e2"].Fate, fs["e2"].Why)
	}
}

// A classic group's position is the runner's own commit: Reach says nothing.
func TestClassicGroupHasNoReach(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	brokertest.Publish(t, tp, "e1")
	read(t, tp, "w")
	if _, ok, err := tp.Reach(testCtx(t), "g"); ok || err != nil {
		t.Errorf("reach of a classic group: ok %v, %v; want not ok", ok, err)
	}
}

// An acknowledgement the broker refuses is reported, not dropped: a record
// whose acquisition lock ran out (the broker took it back) is not
// acknowledged by the worker's late ack, and the Ack says what the broker
// said; a release refused likewise fails the Nack.
func TestShareGroupAckTheBrokerRefusedIsReported(t *testing.T) {
	t.Parallel()
	tp := shortLockTopic(t)
	brokertest.Publish(t, tp, "e1", "e2")
	ds := readAll(t, tp)
	if len(ds) != 2 {
		t.Fatalf("read %v; want e1 and e2", brokertest.EventIDs(ds))
	}
	time.Sleep(500 * time.Millisecond) // both locks run out: the broker takes them back
	var na *broker.NotAcked
	if err := tp.Ack(testCtx(t), "g", ds[0].ID); !errors.As(err, &na) || !slices.Equal(na.IDs, []string{ds[0].ID}) || !strings.Contains(na.Why, "INVALID_RECORD_STATE") {
		t.Fatalf("ack after the lock ran out: %v; want e1 not acknowledged, the broker's refusal named", err)
	}
	if err := tp.Nack(testCtx(t), "g", ds[1].ID); err == nil || !strings.Contains(err.Error(), "INVALID_RECORD_STATE") {
		t.Fatalf("nack after the lock ran out: %v; want the broker's refusal", err)
	}
}

// A fetch still on its way when a worker's poll ended (its wait ran out
// during the fetch's long poll) brings a record published meanwhile: the
// broker acquires it for that worker, which has not seen it. The adapter
// gives it back when another worker polls, so that worker's claim gets it
// (not after the 30 s acquisition lock), and the first worker's next poll
// does not hand out the copy still in its client's buffer.
func TestShareGroupAFetchAfterThePollEndedIsGivenBack(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Share: true})
	brokertest.Publish(t, tp, "e0")
	readOne(t, tp, "w1", "e0") // w1 joined and fetches
	for i := 1; i <= 5; i++ {
		id := strayAfterAnEmptyRead(t, tp, "w1", i)
		ds, err := tp.Claim(testCtx(t), "g", "w2", 0, 1)
		if err != nil || len(ds) != 1 || ds[0].EventID != id {
			t.Fatalf("claim %d by w2: %+v, %v; want %s", i, ds, err, id)
		}
		if err := tp.Ack(testCtx(t), "g", ds[0].ID); err != nil {
			t.Fatal(err)
		}
		if ds, err := tp.Read(testCtx(t), "g", "w1", 1, 200*time.Millisecond); err != nil || len(ds) != 0 {
			t.Fatalf("w1's read after w2 took %s: %+v, %v; want nothing", id, ds, err)
		}
	}
}

// strayAfterAnEmptyRead has worker read with nothing new, its poll's 20 ms
// running out during the fetch's 100 ms long poll, then publishes e<i>,
// which that fetch brings after the poll ended. It returns the event id.
func strayAfterAnEmptyRead(t *testing.T, tp *Topic, worker string, i int) string {
	t.Helper()
	if ds, err := tp.Read(testCtx(t), "g", worker, 1, 20*time.Millisecond); err != nil || len(ds) != 0 {
		t.Fatalf("read %d with nothing new: %+v, %v", i, ds, err)
	}
	id := fmt.Sprintf("e%d", i)
	brokertest.Publish(t, tp, id)
	time.Sleep(150 * time.Millisecond) // the long poll answers with it
	return id
}

// shortLockTopic is a share-group topic on a kfake of its own whose
// acquisition locks run out after 200 ms.
func shortLockTopic(t *testing.T) *Topic {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{
		"group.share.record.lock.duration.ms": "200",
		"share.record.lock.sweep.interval.ms": "20",
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tp, err := New(testCtx(t), c.ListenAddrs(), "outboxdrill:test-"+rand.Text()[:10], Options{Share: true, Session: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Delete(context.Background()) })
	return tp
}

// A record the worker kept unsettled past its lock: the client's implicit
// accept at the next poll is refused (the broker took the record back),
// which is not that read's failure — the read goes on and gets the
// record again, its deliveries counted (two or more: a fetch still on
// its way when the lock ran out may have taken it once meanwhile).
func TestShareGroupARefusedImplicitAcceptDoesNotFailTheRead(t *testing.T) {
	t.Parallel()
	tp := shortLockTopic(t)
	brokertest.Publish(t, tp, "e1")
	readOne(t, tp, "w", "e1")          // kept: neither acked nor released
	time.Sleep(500 * time.Millisecond) // its lock runs out
	ds, err := tp.Read(testCtx(t), "g", "w", 1, 2*time.Second)
	if err != nil || len(ds) != 1 || ds[0].EventID != "e1" || ds[0].Deliveries < 2 {
		t.Fatalf("read after the kept record's lock ran out: %+v, %v; want e1 again, a later delivery", ds, err)
	}
}

// A share group's traces name its own operations: a skip_ack crashed
// before ShareAcknowledge, not before an OffsetCommit it never makes.
func TestShareGroupVerbs(t *testing.T) {
	t.Parallel()
	if v := (&Topic{opt: Options{Share: true}}).Verbs(); v.Read != "ShareFetch" || v.Ack != "ShareAcknowledge" || v.Publish != "Produce" {
		t.Errorf("share group verbs %+v", v)
	}
	if v := (&Topic{}).Verbs(); v != Kind.Verbs {
		t.Errorf("classic group verbs %+v, want the kind's %+v", v, Kind.Verbs)
	}
}

// A worker's first read is its record's first delivery, however long
// after NewClient the member's topic is paused. (Its client fetches
// nothing before the pause; and a fetch before its first poll would bring
// a stray, which is that poll's.) Not parallel: it sets clientBorn.
func TestShareGroupFirstReadIsTheFirstDelivery(t *testing.T) {
	clientBorn = func() { time.Sleep(300 * time.Millisecond) }
	t.Cleanup(func() { clientBorn = func() {} })
	tp := newTopic(t, Options{Share: true})
	brokertest.Publish(t, tp, "e1")
	if d := readOne(t, tp, "w", "e1"); d.Deliveries != 1 {
		t.Fatalf("first read of e1: delivery %d; want 1", d.Deliveries)
	}
}

// A record a fetch brought after the worker's read ended empty (the
// read's wait ran out during the fetch's long poll) is the worker's next
// read, on its first delivery: the broker acquired it for this member and
// nobody saw it. Given back at once, it came on its second delivery, and
// max_deliveries set it aside one delivery early.
func TestShareGroupAFetchAfterThePollEndedIsTheNextRead(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Share: true})
	brokertest.Publish(t, tp, "e0")
	readOne(t, tp, "w", "e0") // joined and fetches
	for i := 1; i <= 5; i++ {
		id := strayAfterAnEmptyRead(t, tp, "w", i)
		if d := readOne(t, tp, "w", id); d.Deliveries != 1 {
			t.Fatalf("%s came on delivery %d; want 1", id, d.Deliveries)
		}
	}
}

// A stray is its record, not its offset: a later delivery of the same
// offset to the member (a new copy, after the stray was given back) is the
// worker's, and the released copy is left out.
func TestAStrayIsItsRecordNotItsOffset(t *testing.T) {
	released := &kgo.Record{Topic: "t", Partition: 0, Offset: 7}
	again := &kgo.Record{Topic: "t", Partition: 0, Offset: 7}
	m := &member{strays: map[*kgo.Record]bool{released: true}}
	if got := m.takeStrays([]*kgo.Record{again}); len(got) != 1 || got[0] != again {
		t.Fatalf("the later delivery of offset 7: kept %v; want it", got)
	}
	if got := m.takeStrays([]*kgo.Record{released}); len(got) != 0 {
		t.Fatalf("the released copy: kept %v; want it left out", got)
	}
	if len(m.strays) != 0 {
		t.Fatalf("strays left after both were handed out: %v", m.strays)
	}
}
