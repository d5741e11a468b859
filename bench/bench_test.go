package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/runner"

	"github.com/outboxdrill/runner/pipeline"
)

// openBenchWorld opens a World on the test servers for the whole benchmark.
func openBenchWorld(b *testing.B) (*runner.World, *runner.Params) {
	b.Helper()
	p := testParams(b)
	p.Timeout = time.Minute
	w, err := runner.OpenWorld(context.Background(), &p)
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

func testParams(t testing.TB) runner.Params {
	return runner.Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}
}

func TestMain(m *testing.M) { testservers.Main(m) }
