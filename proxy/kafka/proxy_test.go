package kafka

// The broker in these tests is franz-go's kfake (github.com/twmb/franz-go/pkg/kfake),
// NOT Apache Kafka: what kfake does not implement, they do not show.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	brokerkafka "github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var seq atomic.Int64

type fixture struct {
	t      *testing.T
	proxy  *Proxy
	direct *kadm.Client
	topic  string
}

// kfakeAddr is the kfake broker testservers runs (RUNNER_KAFKA_URL may
// name another): its first seed.
func kfakeAddr(t testing.TB) string {
	seeds, err := brokerkafka.Seeds(testservers.Broker(t, brokerkafka.Kind))
	if err != nil {
		t.Fatal(err)
	}
	return seeds[0]
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return fixtureOn(t, kfakeAddr(t))
}

func fixtureOn(t *testing.T, seed string) *fixture {
	p, err := Listen(seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := &fixture{t: t, proxy: p, direct: kadm.NewClient(cl), topic: fmt.Sprintf("kafka-proxy-test-%d-%d", time.Now().UnixNano(), seq.Add(1))}
	if _, err := f.direct.CreateTopic(context.Background(), 1, 1, nil, f.topic); err != nil {
		t.Fatal(err)
	}
	return f
}

// client connects through the proxy.
func (f *fixture) client(opts ...kgo.Opt) *kgo.Client {
	f.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.proxy.Addr()), kgo.DefaultProduceTopic(f.topic),
		kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cl.Close)
	return cl
}

func (f *fixture) arm(tr Trigger) *Armed {
	f.t.Helper()
	a, err := f.proxy.Arm(tr)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// stored is the end offset of the topic's partition, read directly.
func (f *fixture) stored() int64 {
	f.t.Helper()
	ends, err := f.direct.ListEndOffsets(context.Background(), f.topic)
	if err != nil {
		f.t.Fatal(err)
	}
	o, _ := ends.Lookup(f.topic, 0)
	return o.Offset
}

// committed is the offset a group committed on the partition, read
// directly (-1: none).
func (f *fixture) committed(group string) int64 {
	f.t.Helper()
	offs, err := f.direct.FetchOffsets(context.Background(), group)
	if err != nil {
		f.t.Fatal(err)
	}
	if o, ok := offs.Lookup(f.topic, 0); ok {
		return o.At
	}
	return -1
}

func produce(cl *kgo.Client, event string) error {
	return cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte(event), Value: []byte("v-" + event),
		Headers: []kgo.RecordHeader{{Key: "event-id", Value: []byte(event)}}}).FirstErr()
}

// poll reads n records through cl.
func poll(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	testutil.Within(t, 20*time.Second, fmt.Sprintf("%d records", n), func() {
		for len(out) < n {
			fs := cl.PollFetches(context.Background())
			out = append(out, fs.Records()...)
		}
	})
	return out
}

func TestRelaysAndRecordsTheHistory(t *testing.T) {
	f := newFixture(t)
	prod := f.client()
	for _, e := range []string{"e1", "e2"} {
		if err := produce(prod, e); err != nil {
			t.Fatal(err)
		}
	}
	group := f.topic + "-g"
	cons := f.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit())
	recs := poll(t, cons, 2)
	if err := cons.CommitRecords(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	pubs, dels, acks := f.proxy.History()
	var have []string
	for _, p := range pubs {
		have = append(have, fmt.Sprintf("publish %s@%d %s", p.Key, p.Offset, p.Header("event-id")))
	}
	for _, d := range dels {
		have = append(have, fmt.Sprintf("deliver %s@%d %s", d.Key, d.Offset, d.Value))
	}
	for _, a := range acks {
		have = append(have, fmt.Sprintf("%s %v %d", a.API, a.Group == group, a.Offset))
	}
	want := []string{"publish e1@0 e1", "publish e2@1 e2", "deliver e1@0 v-e1", "deliver e2@1 v-e2", "OffsetCommit true 2"}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

// Every broker a response names gets a listener: the client never
// reaches the cluster around the proxy. A kfake cluster of three brokers,
// in process.
func TestEveryBrokerIsRewritten(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := fixtureOn(t, c.ListenAddrs()[0])
	md, err := kadm.NewClient(f.client()).BrokerMetadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	listeners := map[string]bool{}
	for _, addr := range f.proxy.Brokers() {
		listeners[addr] = true
	}
	if len(md.Brokers) != 3 || len(listeners) != 3 {
		t.Fatalf("%d brokers, %d listeners; want 3 of each", len(md.Brokers), len(listeners))
	}
	for _, b := range md.Brokers {
		if addr := net.JoinHostPort(b.Host, fmt.Sprint(b.Port)); !listeners[addr] {
			t.Errorf("broker %d is %s, no proxy listener", b.NodeID, addr)
		}
	}
	// A group's coordinator, whichever broker it is, is reached through
	// the proxy too.
	cons := f.client(kgo.ConsumerGroup(f.topic+"-g"), kgo.ConsumeTopics(f.topic))
	if err := produce(f.client(), "e1"); err != nil {
		t.Fatal(err)
	}
	cons.ForceMetadataRefresh()
	for _, r := range kadm.NewClient(f.client()).FindGroupCoordinators(context.Background(), f.topic+"-g") {
		if addr := net.JoinHostPort(r.Host, fmt.Sprint(r.Port)); r.Err != nil || !listeners[addr] {
			t.Errorf("the coordinator is %s (%v), no proxy listener", addr, r.Err)
		}
	}
}

func TestReplyKillOnProduceHoldsTheResponse(t *testing.T) {
	f := newFixture(t)
	var kills atomic.Int32
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Topic: f.topic, Nth: 2, Action: fault.Action{Do: fault.Kill, Kill: func() error { kills.Add(1); return nil }}})
	prod := f.client(kgo.RecordRetries(0), kgo.DisableIdempotentWrite())
	if err := produce(prod, "e1"); err != nil {
		t.Fatal(err)
	}
	if err := produce(prod, "e2"); err == nil {
		t.Error("e2's produce succeeded: its response was not held")
	}
	<-a.Done()
	if kills.Load() != 1 || !a.Fired() || a.Err() != nil {
		t.Fatalf("kills=%d fired=%v err=%v", kills.Load(), a.Fired(), a.Err())
	}
	if got := f.stored(); got != 2 {
		t.Errorf("the log ends at %d; want 2: the broker stored e2", got)
	}
	pubs, _, _ := f.proxy.History()
	if len(pubs) != 2 || string(pubs[1].Key) != "e2" || pubs[1].Fault == "" || pubs[1].Offset != 1 {
		t.Errorf("history: %+v; want e1, then e2 with the fault", pubs)
	}
}

func TestRequestFaultsOnProduce(t *testing.T) {
	f := newFixture(t)
	kill := f.arm(Trigger{Boundary: Request, Op: "Produce", Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	if err := produce(f.client(kgo.RecordRetries(0), kgo.DisableIdempotentWrite()), "k"); err == nil {
		t.Error("a killed produce succeeded")
	}
	<-kill.Done()
	fail := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Error}})
	prod := f.client(kgo.RecordRetries(0), kgo.DisableIdempotentWrite())
	if err := produce(prod, "x"); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("error fault: %v; want NOT_ENOUGH_REPLICAS", err)
	}
	<-fail.Done()
	if err := produce(prod, "ok"); err != nil {
		t.Fatalf("the connection after an error: %v", err)
	}
	if got := f.stored(); got != 1 {
		t.Errorf("the log ends at %d; want 1 (only ok)", got)
	}
}

func TestDeliveryFaults(t *testing.T) {
	f := newFixture(t)
	if err := produce(f.client(), "e1"); err != nil {
		t.Fatal(err)
	}
	drop := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Topic: f.topic, Action: fault.Action{Do: fault.Error}})
	cut := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Cut}})
	cons := f.client(kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	recs := poll(t, cons, 1)
	<-drop.Done()
	<-cut.Done()
	if string(recs[0].Key) != "e1" || !cut.Fired() || cut.Err() != nil {
		t.Fatalf("got %s; cut fired=%v err=%v", recs[0].Key, cut.Fired(), cut.Err())
	}
	_, dels, _ := f.proxy.History()
	if len(dels) != 3 || !dels[0].Dropped || dels[1].Fault == "" || dels[2].Fault != "" {
		t.Errorf("deliveries %+v; want e1 dropped, cut, then delivered", dels)
	}
}

func TestCommitFaults(t *testing.T) {
	f := newFixture(t)
	if err := produce(f.client(), "e1"); err != nil {
		t.Fatal(err)
	}
	group := f.topic + "-g"
	kill := f.arm(Trigger{Boundary: Request, Op: OpAck, Group: group, Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	opts := []kgo.Opt{kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.RequestRetries(0)}
	cons := f.client(opts...)
	recs := poll(t, cons, 1)
	_ = cons.CommitRecords(context.Background(), recs...)
	<-kill.Done()
	if got := f.committed(group); got != -1 {
		t.Errorf("committed %d after a request kill; want none", got)
	}
	held := f.arm(Trigger{Boundary: Reply, Op: "OffsetCommit", Group: group, Action: fault.Action{Do: fault.Cut}})
	cons.Close()
	cons = f.client(opts...)
	recs = poll(t, cons, 1)
	_ = cons.CommitRecords(context.Background(), recs...)
	<-held.Done()
	if got := f.committed(group); got != 1 {
		t.Errorf("committed %d after a reply cut; want 1: the broker committed", got)
	}
}

func TestEndTxnReplyKill(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: "EndTxn", Topic: f.topic, Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	prod := f.client(kgo.TransactionalID(f.topic+"-txn"), kgo.RequestRetries(0))
	ctx := context.Background()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := produce(prod, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Error("the commit's response reached the client")
	}
	<-a.Done()
	cons := f.client(kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if recs := poll(t, cons, 1); string(recs[0].Key) != "t1" {
		t.Errorf("read committed %s; want t1: the broker committed", recs[0].Key)
	}
	// The history is the broker's word: it committed.
	pubs, _, _ := f.proxy.History()
	if len(pubs) != 1 || pubs[0].Outcome != "committed" {
		t.Errorf("publishes %+v; want t1 committed", pubs)
	}
}

func TestShareGroupHistory(t *testing.T) {
	f := newFixture(t)
	for _, e := range []string{"e1", "e2"} {
		if err := produce(f.client(), e); err != nil {
			t.Fatal(err)
		}
	}
	group := f.topic + "-share"
	earliest(t, f, group)
	cons := f.client(kgo.ShareGroup(group), kgo.ConsumeTopics(f.topic))
	recs := poll(t, cons, 2)
	cons.MarkAcks(kgo.AckAccept, recs...)
	if err := cons.FlushAcks(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, dels, acks := f.proxy.History()
	if len(dels) != 2 || dels[0].API != "ShareFetch" || dels[0].DeliveryCount != 1 || dels[0].Group != group {
		t.Errorf("deliveries %+v", dels)
	}
	accepted := 0
	for _, a := range acks {
		for _, b := range a.Share {
			accepted += int(b.Last - b.First + 1)
		}
	}
	if accepted != 2 {
		t.Errorf("acks %+v; want both records accepted", acks)
	}
}

func TestArmRefusesWhatCannotBe(t *testing.T) {
	p := &Proxy{}
	for _, tr := range []Trigger{
		{Boundary: Reply, Op: "JoinGroup", Topic: "t", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: "Produce", Group: "g", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: "Metadata", Action: fault.Action{Do: fault.Error}},
		{Boundary: Reply, Op: "XADD", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Kill}},
	} {
		if _, err := p.Arm(tr); err == nil {
			t.Errorf("%v: armed", tr)
		}
	}
}

// earliest makes a share group read from the start of the log (its
// default, latest, would skip what was produced before it joined).
func earliest(t *testing.T, f *fixture, group string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	value := "earliest"
	c.Name, c.Op, c.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, &value
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(context.Background(), f.client())
	if err != nil {
		t.Fatal(err)
	}
	for _, rr := range resp.Resources {
		if err := kerr.ErrorForCode(rr.ErrorCode); err != nil {
			t.Fatal(err)
		}
	}
}

// The history reads records whatever codec the producer compressed them
// with.
func TestCompressedRecordsAreRead(t *testing.T) {
	f := newFixture(t)
	for _, codec := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		prod := f.client(kgo.ProducerBatchCompression(codec))
		big := strings.Repeat("payload ", 200) // compressible: the codec is used
		if err := prod.ProduceSync(context.Background(), &kgo.Record{Key: []byte("k"), Value: []byte(big)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pubs, _, _ := f.proxy.History()
	if len(pubs) != 4 {
		t.Fatalf("%d publishes read; want 4", len(pubs))
	}
	for i, p := range pubs {
		if p.Offset != int64(i) || len(p.Value) != 1600 {
			t.Errorf("publish %d: offset %d, %d bytes", i, p.Offset, len(p.Value))
		}
	}
	for _, e := range f.proxy.Events() {
		if e.Unread != "" {
			t.Errorf("%s: %s", e.API, e.Unread)
		}
	}
}

// BenchmarkProduce measures what the proxy adds to a Produce round trip
// (acks=all, one record): direct and proxied in turn, on kfake, with a
// trigger armed on commits (matched and counted on every request, never
// struck).
func BenchmarkProduce(b *testing.B) {
	seed := kfakeAddr(b)
	p, err := Listen(seed)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Arm(Trigger{Boundary: Request, Op: OpAck, Action: fault.Action{Do: fault.Cut}}); err != nil {
		b.Fatal(err)
	}
	topic := fmt.Sprintf("kafka-proxy-bench-%d", time.Now().UnixNano())
	var cls [2]*kgo.Client
	for i, addr := range []string{seed, p.Addr()} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		cls[i] = cl
	}
	if _, err := kadm.NewClient(cls[0]).CreateTopic(context.Background(), 1, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	for _, cl := range cls { // connections and metadata up before the clock starts
		if err := produce(cl, "warm"); err != nil {
			b.Fatal(err)
		}
	}
	var rt [2][]time.Duration
	for b.Loop() {
		for i, cl := range cls {
			start := time.Now()
			if err := produce(cl, "e"); err != nil {
				b.Fatal(err)
			}
			rt[i] = append(rt[i], time.Since(start))
		}
	}
	testutil.ReportP50(b, rt[0], rt[1])
}

func TestGroupFaults(t *testing.T) {
	f := newFixture(t)
	if err := produce(f.client(), "e1"); err != nil {
		t.Fatal(err)
	}
	group := f.topic + "-g"
	slow := f.arm(Trigger{Boundary: Reply, Op: "JoinGroup", Group: group, Action: fault.Action{Do: fault.Delay, Delay: 100 * time.Millisecond}})
	fail := f.arm(Trigger{Boundary: Request, Op: "SyncGroup", Group: group, Action: fault.Action{Do: fault.Error}})
	cons := f.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if recs := poll(t, cons, 1); string(recs[0].Key) != "e1" {
		t.Fatalf("got %s", recs[0].Key)
	}
	<-slow.Done()
	<-fail.Done()
	if slow.Err() != nil || fail.Err() != nil || !fail.Fired() {
		t.Fatalf("delay: %v; error: fired=%v %v", slow.Err(), fail.Fired(), fail.Err())
	}
	var syncs []string
	for _, e := range f.proxy.Events() {
		if e.API == "SyncGroup" {
			syncs = append(syncs, fmt.Sprintf("%v dropped=%v", e.Group == group, e.Dropped))
		}
	}
	if len(syncs) < 2 || syncs[0] != "true dropped=true" {
		t.Errorf("SyncGroup events %v; want the failed one, then the client's retry", syncs)
	}
}

// Every operation a parser is told of can be armed at one boundary at
// least.
func TestOperationsCanBeArmed(t *testing.T) {
	for _, op := range Operations() {
		if (Trigger{Boundary: Request, Op: op}).Check() != nil && (Trigger{Boundary: Reply, Op: op}).Check() != nil {
			t.Errorf("%s can be armed at no boundary", op)
		}
	}
}
