package amqpproxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/broker/rabbitmq/amqpproxy"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// drill is a relay and a consumer through the proxy: a publish on a
// channel without confirms, three on a confirm channel, basic.gets (an
// ack, a nack with requeue and the redelivery's ack, a reject, an ack,
// one get-empty), then a publish consumed by basic.consume and acked.
func drill(t *testing.T, arm *fault.Trigger) ([]fault.Crossing, broker.Strike) {
	t.Helper()
	return brokertest.Through(t, amqpproxy.Kind{}, testservers.Broker(t, rabbitmq.Kind), arm, func(p broker.Proxy) {
		conn, err := amqp.Dial(p.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch := func() *amqp.Channel {
			c, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		plain, confirmed, reader := ch(), ch(), ch()
		q := fmt.Sprintf("xing-%d", time.Now().UnixNano())
		if _, err := plain.QueueDeclare(q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		defer plain.QueueDelete(q, false, false, false)
		if err := confirmed.Confirm(false); err != nil {
			t.Fatal(err)
		}
		publish := func(c *amqp.Channel, body string) {
			t.Helper()
			dc, err := c.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			if dc != nil && !dc.Wait() {
				t.Fatal("nacked")
			}
		}
		publish(plain, "0")
		for i := 1; i <= 3; i++ {
			publish(confirmed, fmt.Sprint(i))
		}
		for { // the plain publish is routed too
			st, err := plain.QueueDeclarePassive(q, false, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if st.Messages == 4 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		get := func() amqp.Delivery {
			t.Helper()
			m, ok, err := reader.Get(q, false)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			return m
		}
		_ = get().Ack(false)
		_ = get().Nack(false, true)
		_ = get().Ack(false) // its redelivery
		_ = get().Reject(false)
		_ = get().Ack(false)
		if _, ok, err := reader.Get(q, false); ok || err != nil {
			t.Fatalf("get-empty: %v %v", ok, err)
		}
		publish(confirmed, "4")
		if err := reader.Qos(1, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := reader.ConsumeWithContext(ctx, q, "c", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-ds:
			_ = m.Ack(false)
		case <-ctx.Done():
			t.Fatal("no delivery")
		}
		_ = reader.Cancel("c", false)
	})
}

// Each point explore would take from the crossings strikes the crossing it
// names: its nth counted as the proxy's trigger counts.
func TestCrossingsCountAsTheTriggersDo(t *testing.T) {
	xs, _ := drill(t, nil)
	var got []string
	for _, c := range xs {
		got = append(got, fmt.Sprintf("%s→%s/%d/%d", c.Op, c.Reply, c.Request, c.Response))
	}
	want := fmt.Sprint([]string{
		"publish→/0/1", "publish→ok/0/0", "publish→ok/0/0", "publish→ok/0/0",
		"deliver→entries/0/2", "deliver→entries/2/0", "ack→/0/2",
		"deliver→entries/0/2", "deliver→entries/2/0", "basic.nack→/0/2",
		"deliver→entries/0/2", "deliver→entries/2/0", "ack→/0/2",
		"deliver→entries/0/2", "deliver→entries/2/0", "basic.reject→/0/2",
		"deliver→entries/0/2", "deliver→entries/2/0", "ack→/0/2",
		"deliver→empty/0/2",
		"publish→ok/0/0", "deliver→entries/2/0", "ack→/0/2",
	})
	if fmt.Sprint(got) != want {
		t.Fatalf("crossings\n%v\nwant\n%v", got, want)
	}
	brokertest.EveryCrossingStrikes(t, xs, drill, nil)
}
