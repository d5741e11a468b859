package kafka

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker/brokertest"
)

// A team's relay producing in Kafka transactions (KIP-98) writes a commit
// or abort marker after its records, and an aborted transaction's records
// stay in the log. These tests run on the tests' server, kfake, which
// writes those markers and reports the last stable offset as Kafka does;
// logOffsets shows each time that the log holds more offsets than entries,
// so an Entries or Lag by offset arithmetic fails them.

// txnProducer is a transactional producer on tp's topic, as a team's
// relay runs one (kafkajs transactionalId, Java's transactional.id).
func txnProducer(t *testing.T, tp *Topic, id string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tp.seeds...), kgo.DefaultProduceTopic(tp.name),
		kgo.TransactionalID(tp.name + "." + id), kgo.ProducerLinger(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// begin starts a transaction on cl and produces keys in it.
func begin(t *testing.T, cl *kgo.Client, keys ...string) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Key: []byte(k), Value: []byte(`{}`)}).FirstErr(); err != nil {
			t.Fatalf("produce %s in a transaction: %v", k, err)
		}
	}
}

// end commits or aborts cl's transaction (EndTxn).
func end(t *testing.T, cl *kgo.Client, commit bool) {
	t.Helper()
	if err := cl.EndTransaction(testCtx(t), kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// logOffsets is the end offset minus the start offset of partition 0:
// every offset the log holds, markers and aborted records included.
func logOffsets(t *testing.T, tp *Topic) int64 {
	t.Helper()
	start, end, err := tp.bounds(testCtx(t), tp.name)
	if err != nil {
		t.Fatal(err)
	}
	return end[0] - start[0]
}

// wantEntries checks Entries and Events against the keys a read_committed
// consumer gets, and that the log holds offsets offsets in all.
func wantEntries(t *testing.T, tp *Topic, offsets int64, keys ...string) {
	t.Helper()
	if n, err := tp.Entries(testCtx(t)); err != nil || n != int64(len(keys)) {
		t.Errorf("entries %d, %v; want %d (%v)", n, err, len(keys), keys)
	}
	if ids, err := tp.Events(testCtx(t)); err != nil || !slices.Equal(ids, keys) {
		t.Errorf("events %v, %v; want %v", ids, err, keys)
	}
	if got := logOffsets(t, tp); got != offsets {
		t.Errorf("the log holds %d offsets; want %d (kfake writes a control record per ended transaction)", got, offsets)
	}
}

// wantLag checks the lag of consumer id c.
func wantLag(t *testing.T, tp *Topic, c string, want int64) {
	t.Helper()
	lag, err := tp.Lag(testCtx(t))
	if got, ok := lag[c]; err != nil || !ok || got != want {
		t.Errorf("lag of %s: %v, %v; want %d", c, lag, err, want)
	}
}

// commitAt commits offset at on partition 0 for consumer id c's group,
// as an admin (or a consumer's commit) does.
func commitAt(t *testing.T, tp *Topic, c string, at int64) {
	t.Helper()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: tp.name, Partition: 0, At: at, LeaderEpoch: -1})
	resp, err := tp.adm.CommitOffsets(testCtx(t), tp.GroupID(c), offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tp.adopted, tp.GroupID(c)) {
		tp.Adopt(c) // deleted with the topic
	}
}

// One committed event is one entry, though the log holds it and its commit
// marker; a group that consumed and committed it has no lag, whether it
// committed just past the record or at the end offset, past the marker.
func TestACommittedTxnEventIsOneEntry(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	cl := txnProducer(t, tp, "relay")
	begin(t, cl, "e1")
	end(t, cl, true)
	wantEntries(t, tp, 2, "e1")
	commitAt(t, tp, "team", 0)
	wantLag(t, tp, "team", 1) // not consumed yet: a lag that cannot fail proves nothing
	ds, err := tp.Read(testCtx(t), "g", "w", 0, time.Second)
	if err != nil || !slices.Equal(brokertest.EventIDs(ds), []string{"e1"}) {
		t.Fatalf("read: %v, %v; want e1", brokertest.EventIDs(ds), err)
	}
	wantLag(t, tp, "g", 1) // delivered, not committed
	if err := tp.Ack(testCtx(t), "g", ds[0].ID); err != nil {
		t.Fatal(err)
	}
	wantLag(t, tp, "g", 0) // committed at 1, before the marker
	commitAt(t, tp, "team", 2)
	wantLag(t, tp, "team", 0) // committed at the end offset, past the marker
}

// An aborted transaction's record is no entry and no group's lag.
func TestAnAbortedTxnEventIsNoEntry(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	cl := txnProducer(t, tp, "relay")
	begin(t, cl, "x1")
	end(t, cl, false)
	wantEntries(t, tp, 2)
	commitAt(t, tp, "team", 0)
	wantLag(t, tp, "team", 0)
}

// Two relays' transactions interleaved, one committed, one aborted, and a
// plain record after them: the entries are the committed record and the
// plain one, and a group past the first has the plain one to go.
func TestInterleavedCommitAndAbort(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	a, b := txnProducer(t, tp, "a"), txnProducer(t, tp, "b")
	begin(t, a, "e1") // offset 0
	begin(t, b, "x1") // offset 1
	end(t, a, true)   // marker at 2
	end(t, b, false)  // marker at 3
	brokertest.Publish(t, tp, "e2")
	wantEntries(t, tp, 5, "e1", "e2")
	commitAt(t, tp, "team", 1)
	wantLag(t, tp, "team", 1)
	commitAt(t, tp, "late", 0)
	wantLag(t, tp, "late", 2)
}

// Records of a transaction still open are no entries yet, and neither is a
// plain record after them: a read_committed consumer stops at the last
// stable offset. An aborted transaction before the open one's marker-less
// tail is still no entry. Once the open one commits its records count.
func TestAnOpenTxnHoldsBackEntries(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	a, b := txnProducer(t, tp, "a"), txnProducer(t, tp, "b")
	begin(t, b, "x1") // offset 0
	begin(t, a, "e1") // offset 1: the last stable offset while a is open
	end(t, b, false)  // marker at 2
	brokertest.Publish(t, tp, "e2")
	wantEntries(t, tp, 4)
	commitAt(t, tp, "team", 0)
	wantLag(t, tp, "team", 0)
	end(t, a, true) // marker at 4
	wantEntries(t, tp, 5, "e1", "e2")
	wantLag(t, tp, "team", 2)
}

// Entries counts partition by partition: committed events spread over
// several partitions are each one entry.
func TestTxnEntriesOverPartitions(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{Partitions: 3})
	cl := txnProducer(t, tp, "relay", kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 6 {
		k := fmt.Sprintf("e%d", i)
		r := &kgo.Record{Key: []byte(k), Value: []byte(`{}`), Partition: int32(i % 3)}
		if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	end(t, cl, true)
	if n, err := tp.Entries(testCtx(t)); err != nil || n != 6 {
		t.Errorf("entries %d, %v; want 6", n, err)
	}
	ids, err := tp.Events(testCtx(t))
	if slices.Sort(ids); err != nil || !slices.Equal(ids, want) {
		t.Errorf("events %v, %v; want %v", ids, err, want)
	}
}
