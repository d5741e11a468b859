package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	brokerjs "github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var seq atomic.Int64

type fixture struct {
	t       *testing.T
	proxy   *Proxy
	direct  jetstream.JetStream
	stream  string
	subject string // the stream's subjects are subject.>
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	u, err := url.Parse(testservers.Broker(t, brokerjs.Kind))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	nc, err := natsgo.Connect(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := fmt.Sprintf("%d_%d", time.Now().UnixNano(), seq.Add(1))
	f := &fixture{t: t, proxy: p, direct: js, stream: "PROXY_" + n, subject: "proxytest." + n}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: f.stream, Subjects: []string{f.subject + ".>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), f.stream) })
	return f
}

// client connects through the proxy; it does not reconnect, so that a cut
// is seen as one.
func (f *fixture) client() (*natsgo.Conn, jetstream.JetStream) {
	f.t.Helper()
	nc, err := natsgo.Connect("nats://"+f.proxy.Addr(), natsgo.NoReconnect())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		f.t.Fatal(err)
	}
	return nc, js
}

func (f *fixture) arm(tr Trigger) *Armed {
	f.t.Helper()
	a, err := f.proxy.Arm(tr)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// consumer creates a durable pull consumer on the stream, directly.
func (f *fixture) consumer(name string, ackWait time.Duration) {
	f.t.Helper()
	if _, err := f.direct.CreateOrUpdateConsumer(context.Background(), f.stream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait}); err != nil {
		f.t.Fatal(err)
	}
}

// stored is the payloads the stream holds, read directly.
func (f *fixture) stored() []string {
	f.t.Helper()
	ctx := context.Background()
	s, err := f.direct.Stream(ctx, f.stream)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for sq := info.State.FirstSeq; sq <= info.State.LastSeq && info.State.Msgs > 0; sq++ {
		m, err := s.GetMsg(ctx, sq)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, string(m.Data))
	}
	return out
}

// pending is how many deliveries of a consumer await their ack, read
// directly.
func (f *fixture) pending(name string) int {
	f.t.Helper()
	c, err := f.direct.Consumer(context.Background(), f.stream, name)
	if err != nil {
		f.t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return info.NumAckPending
}

func (f *fixture) publish(js jetstream.JetStream, event string) (*jetstream.PubAck, error) {
	return js.Publish(context.Background(), f.subject+".created", []byte(event), jetstream.WithMsgID(event))
}

// fetch pulls one message through js, waiting at most 2 s for it.
func (f *fixture) fetch(js jetstream.JetStream, consumer string) (jetstream.Msg, error) {
	return f.fetchWithin(js, consumer, 2*time.Second)
}

func (f *fixture) fetchWithin(js jetstream.JetStream, consumer string, wait time.Duration) (jetstream.Msg, error) {
	c, err := js.Consumer(context.Background(), f.stream, consumer)
	if err != nil {
		return nil, err
	}
	b, err := c.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	for m := range b.Messages() {
		return m, nil
	}
	if b.Error() != nil {
		return nil, b.Error()
	}
	return nil, errors.New("no message")
}

func TestRelaysAndRecordsTheHistory(t *testing.T) {
	f := newFixture(t)
	f.consumer("worker", 30*time.Second)
	_, js := f.client()
	ack, err := f.publish(js, "e1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.fetch(js, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Nak(); err != nil {
		t.Fatal(err)
	}
	m, err = f.fetch(js, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(context.Background()); err != nil {
		t.Fatal(err)
	}
	pubs, dels, acks := f.proxy.History()
	var have []string
	for _, p := range pubs {
		have = append(have, fmt.Sprintf("publish %s id=%s %v/%d data=%s", strings.TrimPrefix(p.Subject, f.subject), p.MsgID, p.Stream == f.stream, p.Seq, p.Data))
	}
	for _, d := range dels {
		have = append(have, fmt.Sprintf("deliver %s id=%s %v n=%d seq=%d", d.Consumer, d.MsgID, d.Stream == f.stream, d.Delivered, d.StreamSeq))
	}
	for _, a := range acks {
		have = append(have, fmt.Sprintf("%s %s n=%d seq=%d", a.Kind, a.Consumer, a.Delivered, a.StreamSeq))
	}
	want := []string{
		fmt.Sprintf("publish .created id=e1 true/%d data=e1", ack.Sequence),
		"deliver worker id=e1 true n=1 seq=1", "deliver worker id=e1 true n=2 seq=1",
		"-NAK worker n=1 seq=1", "+ACK worker n=2 seq=1",
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
	if f.pending("worker") != 0 {
		t.Errorf("the double-acked delivery is still pending")
	}
}

func TestReplyKillOnPublishHoldsThePubAck(t *testing.T) {
	f := newFixture(t)
	var kills atomic.Int32
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Nth: 2, Action: fault.Action{Do: fault.Kill, Kill: func() error { kills.Add(1); return nil }}})
	nc, js := f.client()
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*natsgo.Conn) { close(closed) })
	if _, err := f.publish(js, "e1"); err != nil {
		t.Fatal(err)
	}
	// Two in flight: the barrier keeps e3 from the server once e2's
	// PubAck is held.
	f2, _ := js.PublishAsync(f.subject+".created", []byte("e2"))
	f3, _ := js.PublishAsync(f.subject+".created", []byte("e3"))
	<-a.Done()
	if kills.Load() != 1 || !a.Fired() || a.Err() != nil {
		t.Fatalf("kills=%d fired=%v err=%v", kills.Load(), a.Fired(), a.Err())
	}
	<-closed
	for _, pf := range []jetstream.PubAckFuture{f2, f3} {
		select {
		case <-pf.Ok():
			t.Errorf("%s was acknowledged", pf.Msg().Data)
		default:
		}
	}
	if diff := cmp.Diff([]string{"e1", "e2"}, f.stored()); diff != "" {
		t.Errorf("stream (-want +got): e2 stored, e3 never sent\n%s", diff)
	}
	pubs, _, _ := f.proxy.History()
	if len(pubs) != 2 || pubs[1].Fault == "" || string(pubs[1].Data) != "e2" {
		t.Errorf("history: %+v; want e1, then e2 with the fault", pubs)
	}
}

func TestRequestFaultsOnPublish(t *testing.T) {
	f := newFixture(t)
	_, js := f.client()
	kill := f.arm(Trigger{Boundary: Request, Op: OpPublish, Subject: f.subject + ".>", Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	if _, err := f.publish(js, "k"); err == nil {
		t.Fatal("a killed publish succeeded")
	}
	<-kill.Done()
	_, js = f.client()
	fail := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Error}})
	_, err := f.publish(js, "x")
	var api *jetstream.APIError
	if !errors.As(err, &api) || api.Code != 503 || api.ErrorCode != 10077 || !strings.Contains(api.Description, "outboxdrill") {
		t.Fatalf("error fault: %v; want the drill's PubAck error", err)
	}
	<-fail.Done()
	if _, err := f.publish(js, "ok"); err != nil {
		t.Fatalf("the connection after an error: %v", err)
	}
	if diff := cmp.Diff([]string{"ok"}, f.stored()); diff != "" {
		t.Errorf("stream (-want +got):\n%s", diff)
	}
}

func TestDelayOnPublish(t *testing.T) {
	f := newFixture(t)
	_, js := f.client()
	d := f.arm(Trigger{Boundary: Reply, Op: OpPUB, Subject: f.subject + ".*", Action: fault.Action{Do: fault.Delay, Delay: 150 * time.Millisecond}})
	start := time.Now()
	if _, err := f.publish(js, "d"); err != nil || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("delayed publish: %v after %v", err, time.Since(start))
	}
	<-d.Done()
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
}

func TestDeliveryFaults(t *testing.T) {
	f := newFixture(t)
	f.consumer("worker", 300*time.Millisecond)
	if _, err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	// error: the delivery is dropped; JetStream redelivers it.
	drop := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Error}})
	_, js := f.client()
	if m, err := f.fetchWithin(js, "worker", 400*time.Millisecond); err == nil {
		t.Fatalf("a dropped delivery reached the consumer: %s", m.Data())
	}
	<-drop.Done()
	// cut: the consumer's connection closes instead of the delivery.
	cut := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Cut}})
	nc, js := f.client()
	if _, err := f.fetchWithin(js, "worker", 400*time.Millisecond); err == nil {
		t.Fatal("the cut delivery reached the consumer")
	}
	<-cut.Done()
	if !nc.IsClosed() {
		t.Error("the connection is still open after the cut")
	}
	_, js = f.client()
	m, err := f.fetch(js, "worker")
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := m.Metadata()
	if meta.NumDelivered != 3 {
		t.Errorf("delivered %d times; want 3 (dropped, cut, this one)", meta.NumDelivered)
	}
	_, dels, _ := f.proxy.History()
	if len(dels) != 3 || !dels[0].Dropped || dels[1].Fault == "" || dels[2].Delivered != 3 {
		t.Errorf("deliveries: %+v", dels)
	}
}

func TestAckFaults(t *testing.T) {
	f := newFixture(t)
	f.consumer("worker", 30*time.Second)
	if _, err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	var kills atomic.Int32
	kill := f.arm(Trigger{Boundary: Request, Op: OpAck, Subject: "$JS.ACK." + f.stream + ".worker.>", Action: fault.Action{Do: fault.Kill, Kill: func() error { kills.Add(1); return nil }}})
	_, js := f.client()
	m, err := f.fetch(js, "worker")
	if err != nil {
		t.Fatal(err)
	}
	_ = m.Ack()
	<-kill.Done()
	if kills.Load() != 1 || f.pending("worker") != 1 {
		t.Fatalf("kills=%d pending=%d; want the ack never to reach the server", kills.Load(), f.pending("worker"))
	}
	// error on an acknowledged ack: the client hears no one answered.
	fail := f.arm(Trigger{Boundary: Request, Op: OpAckAck, Action: fault.Action{Do: fault.Error}})
	f.consumer("second", 30*time.Second)
	_, js = f.client()
	if m, err = f.fetch(js, "second"); err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(context.Background()); !errors.Is(err, natsgo.ErrNoResponders) {
		t.Fatalf("double ack after an error fault: %v; want no responders", err)
	}
	<-fail.Done()
	// reply(ack) of an ack without a reply subject: nothing to hold.
	none := f.arm(Trigger{Boundary: Reply, Op: OpAck, Action: fault.Action{Do: fault.Cut}})
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	<-none.Done()
	var u *fault.Unclassifiable
	if !errors.As(none.Err(), &u) {
		t.Errorf("reply(ack) on a plain ack: %v; want unclassifiable", none.Err())
	}
	// reply(ack) of an acknowledged ack holds the server's answer.
	slow := f.arm(Trigger{Boundary: Reply, Op: OpAck, Action: fault.Action{Do: fault.Delay, Delay: 100 * time.Millisecond}})
	f.consumer("third", 30*time.Second)
	if m, err = f.fetch(js, "third"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := m.DoubleAck(context.Background()); err != nil || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("double ack held: %v after %v", err, time.Since(start))
	}
	<-slow.Done()
	_, _, acks := f.proxy.History()
	if len(acks) != 2 || acks[0].Consumer != "second" || acks[1].Consumer != "third" {
		t.Errorf("acks: %+v; want the plain ack of second, then third's", acks)
	}
}

func TestPullRequestError(t *testing.T) {
	f := newFixture(t)
	f.consumer("worker", 30*time.Second)
	if _, err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	a := f.arm(Trigger{Boundary: Request, Op: OpDeliver, Subject: "$JS.API.CONSUMER.MSG.NEXT." + f.stream + ".*", Action: fault.Action{Do: fault.Error}})
	_, js := f.client()
	if _, err := f.fetch(js, "worker"); err == nil || !strings.Contains(err.Error(), "outboxdrill") {
		t.Fatalf("fetch: %v; want the drill's 409", err)
	}
	<-a.Done()
	if m, err := f.fetch(js, "worker"); err != nil || string(m.Data()) != "e1" {
		t.Fatalf("the next fetch: %v", err)
	}
}

func TestArmRefusesWhatCannotBe(t *testing.T) {
	p := &Proxy{}
	for _, tr := range []Trigger{
		{Boundary: Request, Op: OpMSG, Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: OpPull, Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: "XADD", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: OpPublish, Subject: "a..b", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: OpPublish, Subject: "a.>.b", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Kill}},
	} {
		if _, err := p.Arm(tr); err == nil {
			t.Errorf("%v: armed", tr)
		}
	}
}

func TestMatchSubject(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"", "a.b", true}, {"a.b", "a.b", true}, {"a.*", "a.b", true}, {"a.*", "a.b.c", false},
		{"a.>", "a.b.c", true}, {"a.>", "a", false}, {"*.b", "a.b", true}, {"a.b", "a.b.c", false}, {"a.b.c", "a.b", false},
	} {
		if got := matchSubject(c.p, c.s); got != c.want {
			t.Errorf("matchSubject(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

func TestParseAckSubject(t *testing.T) {
	for s, want := range map[string]ackMeta{
		"$JS.ACK.S.c.2.10.7.1700000000.0":            {"S", "c", 2, 10, 7},
		"$JS.ACK._.hash.S.c.3.11.8.1700000000.4.tok": {"S", "c", 3, 11, 8},
		"$JS.ACK.S.c.2.10":                           {},
		"foo.ACK.S.c.2.10.7.1.0":                     {},
	} {
		if got := parseAckSubject(s); got != want {
			t.Errorf("%s: %+v, want %+v", s, got, want)
		}
	}
}

// BenchmarkPublish measures what the proxy adds to a JetStream publish's
// round trip (PUB, then its PubAck): direct and proxied in turn, so that
// both see the same machine load, with a trigger armed on acks (matched
// and counted on every publish, never struck). It reports the p50s and
// their difference.
func BenchmarkPublish(b *testing.B) {
	u, err := url.Parse(testservers.Broker(b, brokerjs.Kind))
	if err != nil {
		b.Fatal(err)
	}
	p, err := Listen(u.Host)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Arm(Trigger{Boundary: Request, Op: OpAck, Action: fault.Action{Do: fault.Cut}}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var js [2]jetstream.JetStream
	for i, addr := range []string{u.Host, p.Addr()} {
		nc, err := natsgo.Connect("nats://" + addr)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js[i], _ = jetstream.New(nc)
	}
	name := fmt.Sprintf("PROXY_BENCH_%d", time.Now().UnixNano())
	if _, err := js[0].CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	defer js[0].DeleteStream(ctx, name)
	var rt [2][]time.Duration
	for b.Loop() {
		for i := range js {
			start := time.Now()
			if _, err := js[i].Publish(ctx, name, []byte("e")); err != nil {
				b.Fatal(err)
			}
			rt[i] = append(rt[i], time.Since(start))
		}
	}
	testutil.ReportP50(b, rt[0], rt[1])
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
