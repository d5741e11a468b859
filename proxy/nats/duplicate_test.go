package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/proxy/fault"
)

// A duplicated JetStream publish reaches the server twice: without a
// Nats-Msg-Id the stream stores it twice; with one, JetStream dedupes the
// copy and its PubAck says so (what the broker did). The client is told of
// its own publish only, either way.
func TestDuplicatePublishReachesJetStreamTwice(t *testing.T) {
	for _, b := range []Boundary{Request, Reply} {
		for _, msgID := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/msg-id=%v", b, msgID), func(t *testing.T) {
				f := newFixture(t)
				a := f.arm(Trigger{Boundary: b, Op: OpPublish, Action: fault.Action{Do: fault.Duplicate}})
				_, js := f.client()
				var opts []jetstream.PublishOpt
				if msgID {
					opts = append(opts, jetstream.WithMsgID("e1"))
				}
				ack, err := js.Publish(context.Background(), f.subject+".created", []byte("e1"), opts...)
				if err != nil || ack.Duplicate {
					t.Fatalf("the publish: %+v %v, want the first PubAck", ack, err)
				}
				if err := a.Wait(context.Background()); err != nil || !a.Fired() { // the copy's PubAck may come after the client's
					t.Fatalf("the trigger: %v", err)
				}
				want := "[e1 e1]"
				if msgID {
					want = "[e1]"
				}
				if got := fmt.Sprint(f.stored()); got != want {
					t.Errorf("stored %s, want %s", got, want)
				}
				pubs, _, _ := f.proxy.History()
				if len(pubs) != 2 || pubs[0].Copy || !pubs[1].Copy || pubs[1].Duplicate != msgID {
					t.Errorf("history publishes %+v, want the client's and the copy (JetStream's duplicate: %v)", pubs, msgID)
				}
			})
		}
	}
}

// A duplicated delivery reaches the client twice, the same message with
// the same ack subject; acking both leaves nothing pending.
func TestDuplicateDeliveryReachesTheClientTwice(t *testing.T) {
	f := newFixture(t)
	f.consumer("worker", 30*time.Second)
	if _, err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	a := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Duplicate}})
	nc, _ := f.client()
	inbox := natsgo.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+f.stream+".worker", inbox, []byte(`{"batch":1,"expires":2000000000}`)); err != nil {
		t.Fatal(err)
	}
	var got []*natsgo.Msg
	for range 2 {
		m, err := sub.NextMsg(2 * time.Second)
		if err != nil {
			t.Fatalf("after %d deliveries: %v", len(got), err)
		}
		got = append(got, m)
	}
	if string(got[0].Data) != "e1" || string(got[1].Data) != "e1" || got[0].Reply != got[1].Reply || !strings.HasPrefix(got[0].Reply, "$JS.ACK.") {
		t.Fatalf("deliveries %q %q on %s %s: want e1 twice on one ack subject", got[0].Data, got[1].Data, got[0].Reply, got[1].Reply)
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	for _, m := range got {
		if err := m.AckSync(); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if n := f.pending("worker"); n != 0 {
		t.Errorf("%d pending, want none", n)
	}
	if _, dels, _ := f.proxy.History(); len(dels) != 2 || dels[0].Copy || !dels[1].Copy {
		t.Errorf("history deliveries %+v, want the delivery and its copy", dels)
	}
}

// A dropped PubAck never reaches the client, whose publish times out on
// an open connection; JetStream stored the message. The connection goes
// on: NATS's core is at most once, and nothing pairs by position.
func TestDropSwallowsThePubAck(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Drop}})
	nc, js := f.client()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if ack, err := js.Publish(ctx, f.subject+".created", []byte("e1"), jetstream.WithMsgID("e1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the publish: %+v %v, want a timeout", ack, err)
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	if got := fmt.Sprint(f.stored()); got != "[e1]" {
		t.Errorf("stored %s, want JetStream to have done the work", got)
	}
	if !nc.IsConnected() {
		t.Fatal("the connection closed")
	}
	if _, err := f.publish(js, "e2"); err != nil {
		t.Errorf("the next publish on the connection: %v", err)
	}
}

// A dropped delivery never reaches the consumer; it stays pending until
// its AckWait, as a lost one would.
func TestDropSwallowsADelivery(t *testing.T) {
	f := newFixture(t)
	f.consumer("worker", 30*time.Second)
	if _, err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	a := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Drop}})
	_, js := f.client()
	if m, err := f.fetchWithin(js, "worker", 400*time.Millisecond); err == nil {
		t.Fatalf("a dropped delivery reached the consumer: %s", m.Data())
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	if n := f.pending("worker"); n != 1 {
		t.Errorf("%d pending, want the dropped delivery", n)
	}
}

func TestArmRefusesDuplicateAndDropWhereNotExact(t *testing.T) {
	f := newFixture(t)
	for _, tr := range []Trigger{
		{Boundary: Request, Op: OpDeliver, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: OpAck, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Reply, Op: OpMSG, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: OpPublish, Action: fault.Action{Do: fault.Drop}},
	} {
		if _, err := f.proxy.Arm(tr); err == nil {
			t.Errorf("%v armed", tr)
		}
	}
}
