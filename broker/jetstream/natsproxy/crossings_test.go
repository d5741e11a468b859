package natsproxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	js "github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/jetstream/natsproxy"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// drill is a JetStream relay and consumer through the proxy: three
// publishes, one pull of three, an ack without a reply subject, an ackAck,
// a -NAK, then a second pull and the nak'd message's ackAck.
func drill(t *testing.T, arm *fault.Trigger) ([]fault.Crossing, broker.Strike) {
	t.Helper()
	return brokertest.Through(t, natsproxy.Kind{}, testservers.Broker(t, js.Kind), arm, func(p broker.Proxy) {
		nc, err := nats.Connect(p.URL(), nats.Timeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		j, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		name := fmt.Sprintf("XING%d", time.Now().UnixNano())
		s, err := j.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
		if err != nil {
			t.Fatal(err)
		}
		defer j.DeleteStream(context.Background(), name)
		for i := range 3 {
			if _, err := j.Publish(ctx, name+".ev", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			t.Fatal(err)
		}
		var ms []jetstream.Msg
		for len(ms) < 3 {
			b, err := c.Fetch(3-len(ms), jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for m := range b.Messages() {
				ms = append(ms, m)
			}
			if len(ms) < 3 {
				t.Fatalf("fetched %d of 3", len(ms))
			}
		}
		_ = ms[0].Ack()
		_ = ms[1].DoubleAck(ctx)
		_ = ms[2].Nak()
		b, err := c.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			_ = m.DoubleAck(ctx)
		}
		_ = nc.Flush()
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
		"publish→ok/0/0", "publish→ok/0/0", "publish→ok/0/0",
		"deliver→/0/2", "deliver→entries/2/0", "deliver→entries/2/0", "deliver→entries/2/0",
		"ack→/0/1", "ack→ok/0/0", "-NAK→/0/1",
		"deliver→/0/2", "deliver→entries/2/0", "ack→ok/0/0",
	})
	if fmt.Sprint(got) != want {
		t.Fatalf("crossings\n%v\nwant\n%v", got, want)
	}
	brokertest.EveryCrossingStrikes(t, xs, drill, nil)
}
