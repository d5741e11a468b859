package rabbitmq

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
func TestScenarioLosesOnlyItsOwnConnection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var h testservers.Host
	defer h.Close()
	c, err := Kind.Open(ctx, &h, testservers.Broker(t, Kind), nil)
	if err != nil {
		t.Fatal(err)
	}
	release, err := c.Lease(ctx, "0badc0de")
	if err != nil {
		t.Fatal(err)
	}
	defer release(context.Background())
	sc := broker.Scenario{Consumers: []string{"accounting"}}
	a, err := c.New(ctx, broker.NamePrefix+":0badc0de:1", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Delete(context.Background())
	b, err := c.New(ctx, broker.NamePrefix+":0badc0de:2", sc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Delete(context.Background())
	own, ok := a.(ownConnBroker)
	if !ok {
		t.Fatalf("scenario broker is %T, want one on its own connection", a)
	}
	own.conn.Close() // what the server does to a connection that sent a frame it refuses
	if _, err := a.Publish(ctx, []broker.Message{{EventID: "e-a", Payload: `{}`}}); err == nil {
		t.Fatal("publish on the closed connection succeeded")
	}
	ids, err := b.Publish(ctx, []broker.Message{{EventID: "e-b", Payload: `{}`}})
	if err != nil || len(ids) != 1 {
		t.Fatalf("the other scenario's publish: %v %v", ids, err)
	}
	ds, err := b.Read(ctx, "accounting", "w", 10, 500*time.Millisecond)
	if err != nil || len(ds) != 1 || ds[0].EventID != "e-b" {
		t.Fatalf("the other scenario's read: %+v %v", ds, err)
	}
}
