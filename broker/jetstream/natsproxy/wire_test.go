package natsproxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
	js "github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/jetstream/natsproxy"
	"github.com/outboxdrill/runner/internal/testservers"
)

// A delivery of a consumer the server said takes no acks (AckNone, in its
// create reply through the proxy) is Acked as it is delivered, and its Op
// says why; one of an explicit-ack consumer is unacked until its +ACK, and
// so is one of an AckNone consumer created around the proxy (the wire
// never said). The explicit consumer's AckWait is a Wait; AckNone has none.
func TestWireAckNoneDeliveryIsAcked(t *testing.T) {
	url := testservers.Broker(t, js.Kind)
	p, err := natsproxy.Kind{}.Listen(url)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	connect := func(u string) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		j, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, j
	}
	nc, j := connect(p.URL())
	_, direct := connect(url)
	name := fmt.Sprintf("WIRE%d", time.Now().UnixNano())
	if _, err := direct.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}}); err != nil {
		t.Fatal(err)
	}
	defer direct.DeleteStream(context.Background(), name)
	if _, err := j.PublishMsg(ctx, &nats.Msg{Subject: name + ".ev", Header: nats.Header{"event-id": {"e1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "around", AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	// The consumer made around the proxy is pulled through it with a bare
	// pull request, never looked up: the proxy sees no reply stating its
	// config (an info reply would state it).
	if m, err := nc.Request("$JS.API.CONSUMER.MSG.NEXT."+name+".around", []byte(`{"batch":1,"expires":5000000000}`), 6*time.Second); err != nil || !strings.HasPrefix(m.Reply, "$JS.ACK.") {
		t.Fatalf("pull from around: %v (%+v)", err, m)
	}
	fetch := func(cfg jetstream.ConsumerConfig) jetstream.Msg {
		t.Helper()
		c, err := j.CreateOrUpdateConsumer(ctx, name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("%s: %v", cfg.Durable, err)
		}
		return m
	}
	fetch(jetstream.ConsumerConfig{Durable: "none", AckPolicy: jetstream.AckNonePolicy})
	held := fetch(jetstream.ConsumerConfig{Durable: "explicit", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 4 * time.Second})
	wire := func() []string {
		var out []string
		for _, d := range p.Wire(broker.WireMap{}).Deliveries {
			out = append(out, fmt.Sprintf("%s %s %s acked=%v", d.Group, d.Op, d.EventID, d.Acked))
		}
		return out
	}
	want := []string{"around MSG e1 acked=false", "none MSG (AckNone) e1 acked=true", "explicit MSG e1 acked=false"}
	if diff := cmp.Diff(want, wire()); diff != "" {
		t.Errorf("before the +ACK (-want +got):\n%s", diff)
	}
	if err := held.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	want[2] = "explicit MSG e1 acked=true"
	if diff := cmp.Diff(want, wire()); diff != "" {
		t.Errorf("after the +ACK (-want +got):\n%s", diff)
	}
	waits := p.(broker.Patient).Waits()
	if len(waits) != 1 || waits[0].For != 4*time.Second || waits[0].What != "JetStream consumer explicit of stream "+name+": its AckWait (consumer create reply)" {
		t.Errorf("waits: %+v, want the explicit consumer's AckWait of 4s alone", waits)
	}
}
