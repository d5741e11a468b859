package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/proxy/fault"
)

// A duplicated Produce reaches the broker twice. From a producer without
// idempotence the partition holds two copies; from an idempotent one the
// broker dedupes the copy by the producer's sequence (its response names
// the offset it had given): what the broker did. The client is told of its
// own Produce only.
func TestDuplicateProduce(t *testing.T) {
	for _, b := range []Boundary{Request, Reply} {
		for _, idempotent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/idempotent=%v", b, idempotent), func(t *testing.T) {
				f := newFixture(t)
				a := f.arm(Trigger{Boundary: b, Op: OpPublish, Action: fault.Action{Do: fault.Duplicate}})
				var opts []kgo.Opt
				if !idempotent {
					opts = append(opts, kgo.DisableIdempotentWrite())
				}
				if err := produce(f.client(opts...), "e1"); err != nil {
					t.Fatal(err)
				}
				if err := a.Wait(context.Background()); err != nil || !a.Fired() { // the copy's response may come after the client's
					t.Fatalf("the trigger: %v", err)
				}
				want := int64(2)
				if idempotent {
					want = 1
				}
				if got := f.stored(); got != want {
					t.Errorf("the partition holds %d records, want %d", got, want)
				}
				pubs, _, _ := f.proxy.History()
				if len(pubs) != 2 || pubs[1].Offset != want-1 {
					t.Errorf("history publishes %+v, want the client's and the copy at offset %d", pubs, want-1)
				}
				copies := 0
				for _, e := range f.proxy.Events() {
					if e.Copy && e.Fault != "" && e.API == "Produce" {
						copies++
					}
				}
				if copies != 1 {
					t.Errorf("%d events of the copy, want its response's, with the fault", copies)
				}
			})
		}
	}
}

// A dropped Produce response never reaches the client, whose request
// times out on an open connection; the broker stored the record.
func TestDropSwallowsTheProduceResponse(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Drop}})
	cl := f.client(kgo.DisableIdempotentWrite(), kgo.RecordRetries(0), kgo.ProduceRequestTimeout(time.Second), kgo.RequestTimeoutOverhead(500*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("e1"), Value: []byte("v")}).FirstErr()
	if err == nil {
		t.Fatal("the produce succeeded: its response reached the client")
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	if got := f.stored(); got != 1 {
		t.Errorf("the partition holds %d records, want the broker to have stored it", got)
	}
}

// A dropped Fetch response keeps its records from the consumer, who
// fetches them again on a new connection.
func TestDropSwallowsAFetch(t *testing.T) {
	f := newFixture(t)
	if err := produce(f.client(), "e1"); err != nil {
		t.Fatal(err)
	}
	a := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Drop}})
	cl := f.client(kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequestTimeoutOverhead(500*time.Millisecond))
	got := poll(t, cl, 1)
	if string(got[0].Key) != "e1" {
		t.Fatalf("got %s", got[0].Key)
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	_, dels, _ := f.proxy.History()
	if len(dels) < 2 || !dels[0].Dropped || dels[len(dels)-1].Dropped {
		t.Errorf("history deliveries %+v, want the dropped one, then the one that reached the client", dels)
	}
}

func TestArmRefusesDuplicateAndDropWhereNotExact(t *testing.T) {
	f := newFixture(t)
	for _, tr := range []Trigger{
		{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: "OffsetCommit", Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: OpPublish, Action: fault.Action{Do: fault.Drop}},
	} {
		if _, err := f.proxy.Arm(tr); err == nil {
			t.Errorf("%v armed", tr)
		}
	}
}
