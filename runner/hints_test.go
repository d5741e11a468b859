package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
)

// --keep hints name the tool of the scenario's own broker, and only that one.
func TestKeepHintsPerBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testParams(t)
	p.URLs[broker.NATS], p.URLs[broker.RabbitMQ] = testservers.URL(t, broker.NATS), testservers.URL(t, broker.RabbitMQ)
	p.Brokers = []string{broker.Redis, broker.NATS, broker.RabbitMQ}
	w, err := OpenWorld(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tools := map[string]string{broker.Redis: "redis-cli", broker.NATS: "nats --server", broker.RabbitMQ: "rabbitmqctl"}
	for b, tool := range tools {
		pair, err := w.TakePair(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		hints := strings.Join(w.inspect(pair.iso, b), "\n")
		if !strings.Contains(hints, "psql") || !strings.Contains(hints, tool) || !strings.Contains(hints, pair.Stream) {
			t.Errorf("%s: hints lack psql, %s or the stream %s:\n%s", b, tool, pair.Stream, hints)
		}
		for other, otherTool := range tools {
			if other != b && strings.Contains(hints, otherTool) {
				t.Errorf("%s: hints name %s's tool %q:\n%s", b, other, otherTool, hints)
			}
		}
		if err := w.ReturnPair(ctx, pair); err != nil {
			t.Fatal(err)
		}
	}
}
