package respproxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// compiled is t as the runner hands it to the proxy: compiled by Redis's
// dialect.
func compiled(t fault.Trigger) fault.Compiled {
	return fault.Compile(t, fault.Dialect{Broker: "redis", Vocabulary: Kind{}}, nil)
}

// A publish's Pass counts the broker faults struck before it in the
// proxy's record: the XADD a fault failed ends the first pass, so the
// same event published again after it is the next pass's (a retry), and
// the one before stays in the first.
func TestWirePassCountsBrokerFaults(t *testing.T) {
	url := testservers.Redis(t)
	p, err := Kind{}.Listen(url)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Arm(compiled(fault.Trigger{Link: fault.Broker, Boundary: fault.Request, Filter: fault.Filter{Command: "publish"}, Nth: 2, Action: fault.Action{Do: fault.Error}})); err != nil {
		t.Fatal(err)
	}
	opts, err := redis.ParseURL(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	stream := fmt.Sprintf("respproxy-pass-test:%d", time.Now().UnixNano())
	defer c.Del(ctx, stream)
	for i, ev := range []string{"e1", "e2", "e2"} {
		err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"event_id": ev}}).Err()
		if (err != nil) != (i == 1) {
			t.Fatalf("XADD %d (%s): %v; want an error for the second only", i+1, ev, err)
		}
	}
	w := p.Wire(broker.WireMap{EventID: "event_id"})
	var got []string
	for _, m := range w.Publishes {
		got = append(got, fmt.Sprintf("%s@%d", m.EventID, m.Pass))
	}
	if want := "[e1@0 e2@1]"; fmt.Sprint(got) != want {
		t.Errorf("publishes %v, want %s", got, want)
	}
}

// A duplicate's copy is the proxy's publish: a pass of its own, so the
// service's one XADD and the copy are no double publish of the service's,
// and what the service publishes after it is the next pass's.
func TestWireCopyIsAPassOfItsOwn(t *testing.T) {
	p, err := Kind{}.Listen(testservers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Arm(compiled(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "publish"}, Action: fault.Action{Do: fault.Duplicate}})); err != nil {
		t.Fatal(err)
	}
	opts, err := redis.ParseURL(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	stream := fmt.Sprintf("respproxy-copy-test:%d", time.Now().UnixNano())
	defer c.Del(ctx, stream)
	for _, ev := range []string{"e1", "e2"} {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"event_id": ev}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, m := range p.Wire(broker.WireMap{EventID: "event_id"}).Publishes {
		got = append(got, fmt.Sprintf("%s@%d", m.EventID, m.Pass))
	}
	if want := "[e1@0 e1@1 e2@2]"; fmt.Sprint(got) != want {
		t.Errorf("publishes %v, want %s", got, want)
	}
}

// Compile says where duplicate and drop apply on Redis, in the neutral
// words too.
func TestCheckSaysWhereDuplicateAndDropApply(t *testing.T) {
	for _, c := range []struct {
		b    fault.Boundary
		cmd  string
		do   fault.Do
		want bool
	}{
		{fault.Request, "publish", fault.Duplicate, true},
		{fault.Reply, "deliver", fault.Duplicate, true},
		{fault.Reply, "XAUTOCLAIM", fault.Duplicate, true},
		{fault.Request, "deliver", fault.Duplicate, false},
		{fault.Reply, "ack", fault.Duplicate, false},
		{fault.Reply, "ack", fault.Drop, true},
		{fault.Request, "publish", fault.Drop, false},
	} {
		err := compiled(fault.Trigger{Link: fault.Broker, Boundary: c.b, Filter: fault.Filter{Command: c.cmd}, Action: fault.Action{Do: c.do}}).Skip
		if (err == nil) != c.want {
			t.Errorf("%v(%s) do=%v: %v, want applies %v", c.b, c.cmd, c.do, err, c.want)
		}
	}
}
