package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/world"

	"github.com/outboxdrill/runner/pipeline"
)

// openBenchWorld opens a World on the test servers for the whole benchmark.
func openBenchWorld(b *testing.B) (*world.World, *runner.Params) {
	b.Helper()
	p := testParams(b)
	p.Timeout = time.Minute
	w, err := world.Open(context.Background(), &world.Config{PGURL: p.PGURL, URLs: p.URLs, Parallel: p.Parallel}, world.Shape{Brokers: []string{broker.Redis}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Close() })
	return w, &p
}

// BenchmarkPipeline measures one event through the reference pipeline, stage
// by stage: the producer transaction, the relay (XADD + mark), the consumer
// transaction + XACK.
func BenchmarkPipeline(b *testing.B) {
	w, _ := openBenchWorld(b)
	ctx := context.Background()
	iso, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.ReturnPair(ctx, iso) })
	env := iso.Env
	prod := &pipeline.Producer{DB: env.Producer}
	relay := &pipeline.Relay{DB: env.Producer, Broker: env.Broker}
	cons := &pipeline.Consumer{DB: env.Consumer, Broker: env.Broker}
	n := 0
	b.Run("produce", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			n++
			t := pipeline.Transfer{EventID: fmt.Sprintf("e-%d", n), From: "alice", To: "bob", Amount: 1, Currency: "USD"}
			if _, err := prod.Produce(ctx, t, pipeline.NoFault); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("relay-1", func(b *testing.B) {
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			n++
			t := pipeline.Transfer{EventID: fmt.Sprintf("e-%d", n), From: "alice", To: "bob", Amount: 1, Currency: "USD"}
			_, _ = prod.Produce(ctx, t, pipeline.NoFault)
			b.StartTimer()
			if _, err := relay.Relay(ctx, pipeline.RelayOptions{}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		}
	})
	b.Run("consume-1", func(b *testing.B) {
		opt := pipeline.ConsumeOptions{Consumer: "bench", Worker: "w", Count: 1}
		for i := 0; i < b.N; i++ {
			res, err := cons.Consume(ctx, opt)
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Handled) == 0 { // ran out: make more entries outside the timer
				b.StopTimer()
				n++
				t := pipeline.Transfer{EventID: fmt.Sprintf("e-%d", n), From: "alice", To: "bob", Amount: 1, Currency: "USD"}
				_, _ = prod.Produce(ctx, t, pipeline.NoFault)
				_, _ = relay.Relay(ctx, pipeline.RelayOptions{})
				b.StartTimer()
				i--
			}
		}
	})
}

// BenchmarkIsolation is the per-scenario overhead: take a reset database pair
// with a new stream, write a row, give it back (delete rows and stream).
func BenchmarkIsolation(b *testing.B) {
	w, _ := openBenchWorld(b)
	ctx := context.Background()
	iso, err := w.TakePair(ctx, broker.Redis) // the first pair is created once per run
	if err != nil {
		b.Fatal(err)
	}
	_ = w.ReturnPair(ctx, iso)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		iso, err := w.TakePair(ctx, broker.Redis)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := iso.Env.Producer.Exec(ctx, `INSERT INTO accounts VALUES ('a', 'USD', 1)`); err != nil {
			b.Fatal(err)
		}
		if err := w.ReturnPair(ctx, iso); err != nil {
			b.Fatal(err)
		}
	}
}

// proxyProtocols are the rows of bench --only proxy: one per protocol
// proxy.
var proxyProtocols = []string{"PostgreSQL", "Redis", "NATS", "RabbitMQ", "Kafka"}

// TestProxyLatencyEveryProtocol: every protocol proxy has its row, each
// with n round trips timed direct and n proxied. No figure is judged: the
// machine's load decides them.
func TestProxyLatencyEveryProtocol(t *testing.T) {
	p := Params{PGURL: testservers.PG(t), Redis: testservers.Redis(t), URLs: map[string]string{}}
	for _, k := range []*broker.Kind{jetstream.Kind, rabbitmq.Kind, kafka.Kind} {
		p.URLs[k.Name] = testservers.Broker(t, k)
	}
	const n = 20
	rts, err := proxyLatency(context.Background(), p, n)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rt := range rts {
		got = append(got, rt.proto)
	}
	if !slices.Equal(got, proxyProtocols) {
		t.Fatalf("rows %q, want %q", got, proxyProtocols)
	}
	for _, rt := range rts {
		if rt.na != "" || rt.figure() == "n/a" {
			t.Errorf("%s: no figure: %s", rt.proto, rt.note())
			continue
		}
		if len(rt.direct) != n || len(rt.proxied) != n {
			t.Errorf("%s: %d direct and %d proxied round trips, want %d each", rt.proto, len(rt.direct), len(rt.proxied), n)
		}
		// A bare forwarder beside every proxy but Kafka's, whose row says why not.
		if wantBare := rt.proto != "Kafka"; (len(rt.bare) == n) != wantBare || wantBare != strings.Contains(rt.note(), "bare forwarder ") ||
			!wantBare && !strings.Contains(rt.note(), "no bare forwarder: ") {
			t.Errorf("%s: %d round trips through the bare forwarder (want one beside each proxy but Kafka's); note %q", rt.proto, len(rt.bare), rt.note())
		}
		for _, d := range append(slices.Clone(rt.direct), rt.proxied...) {
			if d <= 0 {
				t.Errorf("%s: a round trip of %v", rt.proto, d)
				break
			}
		}
		if !strings.HasPrefix(rt.note(), rt.what+": direct ") {
			t.Errorf("%s: note %q", rt.proto, rt.note())
		}
	}
	if rt := rts[len(rts)-1]; !strings.Contains(rt.what, "(kfake)") {
		t.Errorf("Kafka on the tests' kfake: row %q does not say kfake", rt.what)
	}
}

// TestProxyLatencyBrokerAbsent: a broker whose server cannot be had keeps
// its row, n/a with the reason; the bench goes on.
func TestProxyLatencyBrokerAbsent(t *testing.T) {
	p := Params{PGURL: testservers.PG(t), Redis: testservers.Redis(t), ConnectTimeout: 2 * time.Second, URLs: map[string]string{
		broker.NATS: "nats://127.0.0.1:1", broker.RabbitMQ: "amqp://guest:guest@127.0.0.1:1/", broker.Kafka: "127.0.0.1:1"}}
	rts, err := proxyLatency(context.Background(), p, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rts) != len(proxyProtocols) {
		t.Fatalf("%d rows, want %d", len(rts), len(proxyProtocols))
	}
	for _, rt := range rts[2:] {
		if rt.figure() != "n/a" || !strings.Contains(rt.note(), "127.0.0.1:1") || strings.Contains(rt.note(), "guest:guest") {
			t.Errorf("%s: %s | %s", rt.proto, rt.figure(), rt.note())
		}
	}
}

func testParams(t testing.TB) runner.Params {
	return runner.Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}
}

func TestMain(m *testing.M) { testservers.Main(m) }

// TestBenchSoakRows: the soak section keeps its seven rows, each with a
// figure, the engine's runs judged (no violation).
func TestBenchSoakRows(t *testing.T) {
	t.Parallel()
	p := Params{PGURL: testservers.PG(t), Redis: testservers.Redis(t), SoakEvents: 60, Repeat: 1}
	var rows [][3]string
	if err := benchSoak(t.Context(), p, func(what, figure, note string) { rows = append(rows, [3]string{what, figure, note}) }); err != nil {
		t.Fatal(err)
	}
	want := []string{"soak 60 events, faults 0.1, --parallel 2", "raw baseline, same servers", "soak/raw", "work the faults added",
		"the same soak without faults / raw", "same soak through the protocol proxies", "proxied/direct"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %q", len(rows), len(want), rows)
	}
	for i, r := range rows {
		if r[0] != want[i] || r[1] == "" || strings.Contains(r[1], "NaN") || strings.Contains(r[1], "Inf") {
			t.Errorf("row %d: %q, want %q with a figure", i, r, want[i])
		}
	}
	if !strings.Contains(rows[0][2], "no violation") || !strings.Contains(rows[5][2], "no violation") {
		t.Errorf("a soak found a violation: %q", rows)
	}
}
