package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/proxy/fault"
)

func brokerTrigger(b fault.Boundary, cmd string, do fault.Do) fault.Trigger {
	return fault.Trigger{Link: fault.Broker, Boundary: b, Filter: fault.Filter{Command: cmd}, Action: fault.Action{Do: do}}
}

// A duplicated XADD reaches Redis twice: two entries of the event, the
// client told of the first only, the copy's reply recorded with the fault.
func TestDuplicatePublishMakesTwoEntries(t *testing.T) {
	for _, b := range []fault.Boundary{fault.Request, fault.Reply} {
		t.Run(b.String(), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			a := f.arm(brokerTrigger(b, "XADD", fault.Duplicate))
			id, err := xadd(ctx, f.client(3), f.stream, "e1").Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Wait(ctx); err != nil || !a.Fired() {
				t.Fatalf("the trigger: fired %v, %v", a.Fired(), err)
			}
			if got := f.entries(); strings.Join(got, ",") != "e1,e1" {
				t.Fatalf("entries %v, want the event twice", got)
			}
			msgs, _ := f.direct.XRange(ctx, f.stream, "-", "+").Result()
			if msgs[0].ID != id {
				t.Errorf("the client got %s, want the first entry's id %s", id, msgs[0].ID)
			}
			pubs, _, _ := f.proxy.History()
			if len(pubs) != 2 || pubs[1].ID != msgs[1].ID {
				t.Errorf("history publishes %v, want both entries", pubs)
			}
			if evs := f.proxy.Events(); evs[len(evs)-1].Fault == "" {
				t.Errorf("the copy's event carries no fault: %+v", evs[len(evs)-1])
			}
		})
	}
}

// An XADD with an explicit id duplicated: Redis refuses the copy, and the
// proxy says so (what the broker did), the client none the wiser.
func TestDuplicatePublishWithItsOwnIDRedisRefuses(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(brokerTrigger(fault.Reply, "XADD", fault.Duplicate))
	c := f.client(2)
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: f.stream, ID: "5-1", Values: []any{"event_id", "e1"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(ctx); err != nil { // the copy's reply may come after the client's
		t.Fatal(err)
	}
	if got := f.entries(); len(got) != 1 {
		t.Fatalf("entries %v, want one: Redis refuses the same id", got)
	}
	evs := f.proxy.Events()
	if last := evs[len(evs)-1]; !last.Reply.Err() || last.Fault == "" {
		t.Errorf("the copy's event %+v, want Redis's error with the fault", last)
	}
}

// A duplicated delivery hands the client each entry twice; Redis's
// pending list holds it once, and acking it twice is harmless.
func TestDuplicateDeliveryReachesTheClientTwice(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			id := xadd(ctx, f.direct, f.stream, "e1").Val()
			f.direct.XGroupCreate(ctx, f.stream, "g", "0")
			a := f.arm(brokerTrigger(fault.Reply, "XREADGROUP", fault.Duplicate))
			c := f.client(proto)
			got, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{f.stream, ">"}, Count: 10, Block: -1}).Result()
			if err != nil || len(got) != 1 || len(got[0].Messages) != 2 || got[0].Messages[1].ID != id || got[0].Messages[1].Values["event_id"] != "e1" {
				t.Fatalf("the delivery: %v %v, want %s twice", got, err, id)
			}
			if err := a.Err(); err != nil || !a.Fired() {
				t.Fatalf("the trigger: %v", err)
			}
			for want := range []int64{1, 0} {
				if n, err := c.XAck(ctx, f.stream, "g", id).Result(); err != nil || n != int64(1-want) {
					t.Fatalf("ack %d: %d %v", want+1, n, err)
				}
			}
			if _, dels, _ := f.proxy.History(); len(dels) != 2 {
				t.Errorf("history deliveries %v, want the two the client got", dels)
			}
		})
	}
}

// A duplicate on a read that handed out nothing is unclassifiable.
func TestDuplicateOfAnEmptyReadIsUnclassifiable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.direct.XGroupCreateMkStream(ctx, f.stream, "g", "$")
	a := f.arm(brokerTrigger(fault.Reply, "XREADGROUP", fault.Duplicate))
	err := f.client(2).XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{f.stream, ">"}, Block: -1}).Err()
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("the read: %v, want nil as Redis answered", err)
	}
	var un *fault.Unclassifiable
	if !errors.As(a.Err(), &un) {
		t.Fatalf("the trigger: %v, want unclassifiable", a.Err())
	}
}

// A dropped XADD reply never reaches the client, whose read times out on
// an open connection; Redis did the work.
func TestDropSwallowsTheReply(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(brokerTrigger(fault.Reply, "XADD", fault.Drop))
	o := *f.opts
	o.Addr, o.MaxRetries, o.ReadTimeout = f.proxy.Addr(), -1, 300*time.Millisecond
	c := redis.NewClient(&o)
	defer c.Close()
	err := xadd(ctx, c, f.stream, "e1").Err()
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the XADD: %v, want a read timeout", err)
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	if got := f.entries(); strings.Join(got, ",") != "e1" {
		t.Errorf("entries %v, want Redis to have done the work", got)
	}
	if err := xadd(ctx, c, f.stream, "e2").Err(); err != nil { // a new connection: the pool dropped the timed-out one
		t.Fatal(err)
	}
}

// The silenced connection stays open: a raw client hears nothing after the
// dropped reply, and what it sends next never reaches Redis.
func TestDropLeavesTheConnectionOpenAndSilent(t *testing.T) {
	f := newFixture(t)
	f.arm(brokerTrigger(fault.Reply, "XADD", fault.Drop))
	nc := dial(t, f.proxy.Addr())
	fmt.Fprintf(nc, "*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$8\r\nevent_id\r\n$2\r\ne1\r\n", len(f.stream), f.stream)
	fmt.Fprintf(nc, "*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$8\r\nevent_id\r\n$2\r\ne2\r\n", len(f.stream), f.stream)
	nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 64)
	n, err := nc.Read(buf)
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read %q, %v: want silence on an open connection", buf[:n], err)
	}
	if got := f.entries(); strings.Join(got, ",") != "e1" {
		t.Errorf("entries %v, want e1 only", got)
	}
}

func TestArmRefusesDuplicateAndDropWhereNotExact(t *testing.T) {
	f := newFixture(t)
	for _, tr := range []fault.Trigger{
		brokerTrigger(fault.Request, "XREADGROUP", fault.Duplicate),
		brokerTrigger(fault.Reply, "XACK", fault.Duplicate),
		brokerTrigger(fault.Request, "XADD", fault.Drop),
	} {
		if _, err := f.proxy.Arm(tr); err == nil {
			t.Errorf("%v armed", tr)
		}
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}
