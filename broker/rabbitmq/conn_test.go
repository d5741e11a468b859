package rabbitmq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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

// A clean beside a run that is ending (its forget holds every record of
// the registry while it looks at their names) waits for the records to
// come back instead of finding the registry empty: the dead run's queue
// it records is removed.
func TestCleanWaitsForRecordsAnotherHolds(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	var h testservers.Host
	defer h.Close()
	url := testservers.Broker(t, Kind)
	open := func() conn {
		c, err := Kind.Open(ctx, &h, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.(conn)
	}
	dead, holder, cleaner := open(), open(), open()
	run := fmt.Sprintf("%08x", rand.Uint32())
	if _, err := dead.Lease(ctx, run); err != nil {
		t.Fatal(err)
	}
	q := broker.NamePrefix + ":" + run + ":1.accounting"
	if err := dead.reg.record([]string{q}); err != nil {
		t.Fatal(err)
	}
	ch, err := dead.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// The run dies: its lease queue goes with its connection, its record stays.
	if err := dead.conn.Close(); err != nil {
		t.Fatal(err)
	}

	unlock, err := holder.lockRegistry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hch, err := holder.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	held, err := takeRecords(ctx, hch)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan broker.Cleaned)
	go func() {
		c, err := cleaner.Clean(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	time.Sleep(300 * time.Millisecond) // the clean waits meanwhile
	for _, d := range held {
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	_ = hch.Close()
	unlock()
	c := <-done
	if !slices.Contains(c.Dropped, q) {
		t.Errorf("clean beside a holder of the records dropped %v; want %s among them", c.Dropped, q)
	}
}
