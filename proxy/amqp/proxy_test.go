package amqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var seq atomic.Int64

type fixture struct {
	t      *testing.T
	proxy  *Proxy
	url    *url.URL // the broker's
	direct *amqp.Channel
	queue  string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	u, err := url.Parse(testservers.Broker(t, rabbitmq.Kind))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	f := &fixture{t: t, proxy: p, url: u, queue: fmt.Sprintf("amqp-proxy-test-%d-%d", time.Now().UnixNano(), seq.Add(1))}
	nc, err := amqp.Dial(u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if f.direct, err = nc.Channel(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.direct.QueueDeclare(f.queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.direct.QueueDelete(f.queue, false, false, false) })
	return f
}

// client connects through the proxy and opens a channel.
func (f *fixture) client() (*amqp.Connection, *amqp.Channel) {
	f.t.Helper()
	u := *f.url
	u.Host = f.proxy.Addr()
	nc, err := amqp.Dial(u.String())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { nc.Close() })
	ch, err := nc.Channel()
	if err != nil {
		f.t.Fatal(err)
	}
	return nc, ch
}

func (f *fixture) arm(tr Trigger) *Armed {
	f.t.Helper()
	a, err := f.proxy.Arm(tr)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

func (f *fixture) publish(ch *amqp.Channel, event string) error {
	return ch.PublishWithContext(context.Background(), "", f.queue, false, false, amqp.Publishing{MessageId: event, Body: []byte(event),
		Headers: amqp.Table{"event-id": event}})
}

// stored takes every message the queue holds, directly, and acks them.
func (f *fixture) stored() []string {
	f.t.Helper()
	var out []string
	for {
		m, ok, err := f.direct.Get(f.queue, true)
		if err != nil {
			f.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, string(m.Body))
	}
}

// onClose is notified of a channel's close (nil: closed by the client).
func onClose(ch *amqp.Channel) <-chan *amqp.Error { return ch.NotifyClose(make(chan *amqp.Error, 1)) }

// closed waits for a channel's close and returns it.
func closed(t *testing.T, notified <-chan *amqp.Error) *amqp.Error {
	t.Helper()
	var e *amqp.Error
	testutil.Within(t, 10*time.Second, "the channel's close", func() { e = <-notified })
	return e
}

func TestRelaysAndRecordsTheHistory(t *testing.T) {
	f := newFixture(t)
	_, ch := f.client()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", f.queue, false, false, amqp.Publishing{MessageId: "e1", Body: []byte("e1")})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish: %v", err)
	}
	m, ok, err := ch.Get(f.queue, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := m.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(f.queue, "worker", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m = <-msgs
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Cancel("worker", false); err != nil {
		t.Fatal(err)
	}
	pubs, dels, acks := f.proxy.History()
	var have []string
	for _, p := range pubs {
		have = append(have, fmt.Sprintf("publish %s tag=%d %s id=%s", p.Body, p.Tag, p.Outcome, p.Properties.MessageID))
	}
	for _, d := range dels {
		have = append(have, fmt.Sprintf("%s %s q=%v redelivered=%v", d.Method, d.Body, d.Queue == f.queue, d.Redelivered))
	}
	for _, a := range acks {
		have = append(have, fmt.Sprintf("%s requeue=%v covers=%v", a.Method, a.Requeue, a.Deliveries))
	}
	want := []string{"publish e1 tag=1 ack id=e1", "basic.get-ok e1 q=true redelivered=false", "basic.deliver e1 q=true redelivered=true",
		"basic.nack requeue=true covers=[0]", "basic.ack requeue=false covers=[1]"}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}
}

func TestReplyKillOnPublishHoldsTheConfirm(t *testing.T) {
	f := newFixture(t)
	var kills atomic.Int32
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Queue: f.queue, Nth: 2, Action: fault.Action{Do: fault.Kill, Kill: func() error { kills.Add(1); return nil }}})
	nc, ch := f.client()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var dcs []*amqp.DeferredConfirmation
	for _, e := range []string{"e1", "e2", "e3"} {
		dc, err := ch.PublishWithDeferredConfirm("", f.queue, false, false, amqp.Publishing{Body: []byte(e)})
		if err != nil {
			t.Fatal(err)
		}
		dcs = append(dcs, dc)
		if e == "e1" && !dc.Wait() {
			t.Fatal("e1 was not confirmed")
		}
	}
	<-a.Done()
	if kills.Load() != 1 || !a.Fired() || a.Err() != nil {
		t.Fatalf("kills=%d fired=%v err=%v", kills.Load(), a.Fired(), a.Err())
	}
	testutil.Within(t, 10*time.Second, "the client's connection closing", func() { <-nc.NotifyClose(make(chan *amqp.Error, 1)) })
	for _, dc := range dcs[1:] {
		if dc.Acked() {
			t.Errorf("publish %d was confirmed", dc.DeliveryTag)
		}
	}
	if diff := cmp.Diff([]string{"e1", "e2"}, f.stored()); diff != "" {
		t.Errorf("queue (-want +got): e2 stored, e3 never sent\n%s", diff)
	}
	pubs, _, _ := f.proxy.History()
	if len(pubs) != 2 || pubs[1].Outcome != "ack" || pubs[1].Fault == "" {
		t.Errorf("history: %+v; want e1, then e2 confirmed with the fault", pubs)
	}
}

func TestRequestFaultsOnPublish(t *testing.T) {
	f := newFixture(t)
	kill := f.arm(Trigger{Boundary: Request, Op: OpPublish, Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	_, ch := f.client()
	_ = f.publish(ch, "k")
	<-kill.Done()
	fail := f.arm(Trigger{Boundary: Reply, Op: "basic.publish", RoutingKey: f.queue, Action: fault.Action{Do: fault.Error}})
	nc, ch := f.client()
	notified := onClose(ch)
	if err := f.publish(ch, "x"); err != nil {
		t.Fatal(err)
	}
	e := closed(t, notified)
	if e == nil || e.Code != 406 || !strings.Contains(e.Reason, "outboxdrill") {
		t.Fatalf("channel closed with %v; want 406 from the drill", e)
	}
	<-fail.Done()
	ch, err := nc.Channel()
	if err != nil {
		t.Fatalf("a new channel after the error: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if dc, err := ch.PublishWithDeferredConfirm("", f.queue, false, false, amqp.Publishing{Body: []byte("ok")}); err != nil || !dc.Wait() {
		t.Fatalf("publish after the error: %v", err)
	}
	if diff := cmp.Diff([]string{"ok"}, f.stored()); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
}

func TestConfirmlessPublishHasNoReply(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Cut}})
	_, ch := f.client()
	if err := f.publish(ch, "p"); err != nil {
		t.Fatal(err)
	}
	// A synchronous method after it: the broker has routed the publish.
	if _, err := ch.QueueDeclarePassive(f.queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	var u *fault.Unclassifiable
	if !errors.As(a.Err(), &u) {
		t.Errorf("reply(publish) without confirms: %v; want unclassifiable", a.Err())
	}
	if diff := cmp.Diff([]string{"p"}, f.stored()); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
}

func TestDeliveryFaults(t *testing.T) {
	f := newFixture(t)
	if err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	drop := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Queue: f.queue, Action: fault.Action{Do: fault.Error}})
	nc, ch := f.client()
	notified := onClose(ch)
	msgs, err := ch.Consume(f.queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := closed(t, notified); e == nil || e.Code != 406 {
		t.Fatalf("channel closed with %v; want 406", e)
	}
	if m, ok := <-msgs; ok {
		t.Fatalf("a dropped delivery reached the consumer: %s", m.Body)
	}
	<-drop.Done()
	cut := f.arm(Trigger{Boundary: Reply, Op: "basic.get-ok", Action: fault.Action{Do: fault.Cut}})
	ch, err = nc.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ch.Get(f.queue, false); err == nil {
		t.Fatal("the cut delivery reached the client")
	}
	<-cut.Done()
	_, ch = f.client()
	m, ok, err := ch.Get(f.queue, false)
	if err != nil || !ok || string(m.Body) != "e1" || !m.Redelivered {
		t.Fatalf("get after the faults: %v %v %+v", ok, err, m)
	}
	_, dels, _ := f.proxy.History()
	if len(dels) != 3 || !dels[0].Dropped || dels[1].Fault == "" || !dels[2].Redelivered {
		t.Errorf("deliveries: %+v", dels)
	}
}

func TestAckFaults(t *testing.T) {
	f := newFixture(t)
	for _, e := range []string{"e1", "e2"} {
		if err := f.publish(f.direct, e); err != nil {
			t.Fatal(err)
		}
	}
	var kills atomic.Int32
	kill := f.arm(Trigger{Boundary: Request, Op: OpAck, Queue: f.queue, Action: fault.Action{Do: fault.Kill, Kill: func() error { kills.Add(1); return nil }}})
	nc, ch := f.client()
	m, ok, err := ch.Get(f.queue, false)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	_ = m.Ack(false)
	<-kill.Done()
	testutil.Within(t, 10*time.Second, "the connection closing", func() { <-nc.NotifyClose(make(chan *amqp.Error, 1)) })
	fail := f.arm(Trigger{Boundary: Request, Op: "basic.ack", Action: fault.Action{Do: fault.Error}})
	_, ch = f.client()
	notified := onClose(ch)
	if m, ok, err = ch.Get(f.queue, false); err != nil || !ok {
		t.Fatal(ok, err)
	}
	_ = m.Ack(false)
	if e := closed(t, notified); e == nil || e.Code != 406 {
		t.Fatalf("channel closed with %v; want 406", e)
	}
	<-fail.Done()
	if kills.Load() != 1 {
		t.Errorf("kills=%d", kills.Load())
	}
	// Neither ack reached the broker: both messages are still there (the
	// one the second client held comes back once the broker has closed its
	// channel, which may be just after the client saw the 406).
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = append(got, f.stored()...)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"e1", "e2"}, got); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	if _, _, acks := f.proxy.History(); len(acks) != 0 {
		t.Errorf("acks %+v; want none forwarded", acks)
	}
}

func TestReplyKillOnTxCommit(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: "tx.commit", Action: fault.Action{Do: fault.Kill, Kill: func() error { return nil }}})
	_, ch := f.client()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	if err := f.publish(ch, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err == nil {
		t.Fatal("the commit's -ok reached the client")
	}
	<-a.Done()
	if diff := cmp.Diff([]string{"t1"}, f.stored()); diff != "" {
		t.Errorf("queue (-want +got): the broker committed\n%s", diff)
	}
	if pubs, _, _ := f.proxy.History(); len(pubs) != 1 || pubs[0].Outcome != "committed" {
		t.Errorf("publishes %+v; want t1 committed", pubs)
	}
}

func TestArmRefusesWhatCannotBe(t *testing.T) {
	p := &Proxy{}
	for _, tr := range []Trigger{
		{Boundary: Reply, Op: OpAck, Action: fault.Action{Do: fault.Cut}},
		{Boundary: Request, Op: "basic.deliver", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: "basic.reject", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: "XADD", Action: fault.Action{Do: fault.Cut}},
		{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Kill}},
	} {
		if _, err := p.Arm(tr); err == nil {
			t.Errorf("%v: armed", tr)
		}
	}
}

// BenchmarkPublish measures what the proxy adds to a confirmed publish's
// round trip (basic.publish with its message, then its basic.ack): direct
// and proxied in turn, with a trigger armed on acks (matched and counted
// on every publish, never struck).
func BenchmarkPublish(b *testing.B) {
	u, err := url.Parse(testservers.Broker(b, rabbitmq.Kind))
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
	queue := fmt.Sprintf("amqp-proxy-bench-%d", time.Now().UnixNano())
	var chs [2]*amqp.Channel
	for i, host := range []string{u.Host, p.Addr()} {
		pu := *u
		pu.Host = host
		nc, err := amqp.Dial(pu.String())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		if chs[i], err = nc.Channel(); err != nil {
			b.Fatal(err)
		}
		if err := chs[i].Confirm(false); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := chs[0].QueueDeclare(queue, false, true, false, false, nil); err != nil {
		b.Fatal(err)
	}
	defer chs[0].QueueDelete(queue, false, false, false)
	var rt [2][]time.Duration
	for b.Loop() {
		for i, ch := range chs {
			start := time.Now()
			dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{Body: []byte("e")})
			if err != nil || !dc.Wait() {
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

// A delivery to a consumer or a basic.get that asked for no acks is
// recorded NoAck (RabbitMQ counts it acknowledged as it sends it); one to
// a consumer that acks is not. The consumer tag the broker chose (an
// empty one in basic.consume) is learnt from its consume-ok.
func TestNoAckDeliveriesAreMarked(t *testing.T) {
	f := newFixture(t)
	_, ch := f.client()
	for _, e := range []string{"got-no-ack", "consumed-no-ack"} {
		if err := f.publish(f.direct, e); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // the publish lands
		_, ok, err := ch.Get(f.queue, true)
		if err != nil || !ok && time.Now().After(deadline) {
			t.Fatalf("get: %v %v", ok, err)
		}
		if ok {
			break
		}
	}
	auto, err := ch.Consume(f.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Within(t, 10*time.Second, "the no-ack delivery", func() { <-auto })
	if err := ch.Close(); err != nil { // a no-ack consumer takes all it can
		t.Fatal(err)
	}
	if err := f.publish(f.direct, "consumed-acked"); err != nil {
		t.Fatal(err)
	}
	_, ch2 := f.client()
	acking, err := ch2.Consume(f.queue, "acking", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m amqp.Delivery
	testutil.Within(t, 10*time.Second, "the acked delivery", func() { m = <-acking })
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	_, dels, _ := f.proxy.History()
	var have []string
	for _, d := range dels {
		have = append(have, fmt.Sprintf("%s %s no-ack=%v", d.Method, d.Body, d.NoAck))
	}
	want := []string{"basic.get-ok got-no-ack no-ack=true", "basic.deliver consumed-no-ack no-ack=true", "basic.deliver consumed-acked no-ack=false"}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
}
