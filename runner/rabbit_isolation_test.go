package runner

import (
	"context"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
)

// A scenario's RabbitMQ connection is its own: when the server closes it
// (a frame it refuses, as a 300-byte queue name was), the scenario running
// beside it goes on.
func TestRabbitMQScenarioLosesOnlyItsOwnConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testParams(t)
	_, p.RabbitMQURL = testservers.Brokers(t)
	p.Brokers = []string{broker.RabbitMQ}
	w, err := OpenWorld(ctx, &p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, err := w.TakePair(ctx, broker.RabbitMQ)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.TakePair(ctx, broker.RabbitMQ)
	if err != nil {
		t.Fatal(err)
	}
	defer w.ReturnPair(ctx, b)
	own, ok := a.Env.Broker.(ownConnBroker)
	if !ok {
		t.Fatalf("scenario broker is %T, want one on its own connection", a.Env.Broker)
	}
	own.conn.Close() // what the server does to a connection that sent a frame it refuses
	if _, err := a.Env.Broker.Publish(ctx, []broker.Message{{EventID: "e-a", Payload: `{}`}}); err == nil {
		t.Fatal("publish on the closed connection succeeded")
	}
	ids, err := b.Env.Broker.Publish(ctx, []broker.Message{{EventID: "e-b", Payload: `{}`}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("the other scenario's publish: %v %v", ids, err)
	}
	ds, err := b.Env.Broker.Read(ctx, "accounting", "w", 10, 500*time.Millisecond)
	if err != nil || len(ds) != 1 || ds[0].EventID != "e-b" {
		t.Fatalf("the other scenario's read: %+v %v", ds, err)
	}
	_ = w.ReturnPair(ctx, a)
}
