package amqpproxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/broker/rabbitmq/amqpproxy"
	"github.com/outboxdrill/runner/internal/testservers"
)

// A delivery to a no-ack consumer (auto-ack) settled its copy as the
// broker sent it: the Wire has it Acked, and its Op says why, though the
// client never sent a basic.ack. One to a consumer that acks is Acked by
// its basic.ack alone: unacked until then.
func TestWireNoAckDeliveryIsAcked(t *testing.T) {
	p, err := amqpproxy.Kind{}.Listen(testservers.Broker(t, rabbitmq.Kind))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := amqp.Dial(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := fmt.Sprintf("wire-no-ack-%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(q, false, false, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	receive := func(autoAck bool, id string) amqp.Delivery {
		t.Helper()
		if err := ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{MessageId: id, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.ConsumeWithContext(ctx, q, id, autoAck, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Cancel(id, false)
		select {
		case m := <-ds:
			return m
		case <-ctx.Done():
			t.Fatalf("no delivery of %s", id)
		}
		return amqp.Delivery{}
	}
	receive(true, "auto")
	held := receive(false, "held")
	wire := func() []string {
		var out []string
		for _, d := range p.Wire(broker.WireMap{}).Deliveries {
			out = append(out, fmt.Sprintf("%s %s acked=%v", d.Op, d.EventID, d.Acked))
		}
		return out
	}
	want := []string{"basic.deliver (no-ack) auto acked=true", "basic.deliver held acked=false"}
	if diff := cmp.Diff(want, wire()); diff != "" {
		t.Errorf("before the ack (-want +got):\n%s", diff)
	}
	if err := held.Ack(false); err != nil {
		t.Fatal(err)
	}
	want[1] = "basic.deliver held acked=true"
	deadline := time.Now().Add(10 * time.Second) // the ack crosses the proxy
	for cmp.Diff(want, wire()) != "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if diff := cmp.Diff(want, wire()); diff != "" {
		t.Errorf("after the ack (-want +got):\n%s", diff)
	}
}
