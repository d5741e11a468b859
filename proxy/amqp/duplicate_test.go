package amqp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/proxy/fault"
)

// A duplicated basic.publish reaches RabbitMQ twice: the queue holds two
// copies, the client sent one; in a transaction the copy rides it.
func TestDuplicatePublishPutsTwoCopiesInTheQueue(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("tx=%v", tx), func(t *testing.T) {
			f := newFixture(t)
			a := f.arm(Trigger{Boundary: Request, Op: OpPublish, Action: fault.Action{Do: fault.Duplicate}})
			_, ch := f.client()
			if tx {
				if err := ch.Tx(); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.publish(ch, "e1"); err != nil {
				t.Fatal(err)
			}
			if tx {
				if err := ch.TxCommit(); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Wait(context.Background()); err != nil || !a.Fired() {
				t.Fatalf("the trigger: %v", err)
			}
			var got []string
			for deadline := time.Now().Add(2 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				got = append(got, f.stored()...)
			}
			if fmt.Sprint(got) != "[e1 e1]" {
				t.Errorf("the queue held %v, want e1 twice", got)
			}
			pubs, _, _ := f.proxy.History()
			if len(pubs) != 2 || pubs[0].Copy || !pubs[1].Copy {
				t.Errorf("history publishes %+v, want the client's and the copy", pubs)
			}
		})
	}
}

// On a channel in confirm mode the copy cannot be exact: unclassifiable,
// and the publish goes once.
func TestDuplicatePublishInConfirmModeIsUnclassifiable(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Request, Op: OpPublish, Action: fault.Action{Do: fault.Duplicate}})
	_, ch := f.client()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", f.queue, false, false, amqp.Publishing{Body: []byte("e1")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("the confirm: %v %v", ok, err)
	}
	var un *fault.Unclassifiable
	if !errors.As(a.Err(), &un) {
		t.Fatalf("the trigger: %v, want unclassifiable", a.Err())
	}
	if got := f.stored(); fmt.Sprint(got) != "[e1]" {
		t.Errorf("the queue held %v, want e1 once", got)
	}
}

// A no-ack delivery is handed twice; one that awaits an ack is not (the
// client would ack its tag twice): unclassifiable, passed once.
func TestDuplicateDelivery(t *testing.T) {
	for _, noAck := range []bool{true, false} {
		t.Run(fmt.Sprintf("no-ack=%v", noAck), func(t *testing.T) {
			f := newFixture(t)
			if err := f.publish(f.direct, "e1"); err != nil {
				t.Fatal(err)
			}
			a := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Duplicate}})
			_, ch := f.client()
			msgs, err := ch.Consume(f.queue, "worker", noAck, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := 1
			if noAck {
				want = 2
			}
			var got []amqp.Delivery
			for timeout := time.After(time.Second); ; {
				select {
				case m := <-msgs:
					got = append(got, m)
					continue
				case <-timeout:
				}
				break
			}
			if len(got) != want || string(got[0].Body) != "e1" || got[len(got)-1].DeliveryTag != got[0].DeliveryTag {
				t.Fatalf("%d deliveries %+v, want e1 %d time(s)", len(got), got, want)
			}
			var un *fault.Unclassifiable
			if noAck && (a.Err() != nil || !a.Fired()) || !noAck && !errors.As(a.Err(), &un) {
				t.Errorf("the trigger: %v", a.Err())
			}
		})
	}
}

// A dropped confirm never reaches the client, whose wait times out; the
// broker took the message, and the channel goes on.
func TestDropSwallowsTheConfirm(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Drop}})
	_, ch := f.client()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", f.queue, false, false, amqp.Publishing{Body: []byte("e1")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := dc.WaitContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the confirm: %v, want none", err)
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	if got := f.stored(); fmt.Sprint(got) != "[e1]" {
		t.Errorf("the queue held %v, want the broker to have taken it", got)
	}
	if ch.IsClosed() {
		t.Error("the channel closed")
	}
}

// A dropped delivery never reaches the consumer; the broker holds it
// unacked on the channel, and requeues it when the channel closes.
func TestDropSwallowsADelivery(t *testing.T) {
	f := newFixture(t)
	if err := f.publish(f.direct, "e1"); err != nil {
		t.Fatal(err)
	}
	a := f.arm(Trigger{Boundary: Reply, Op: OpDeliver, Action: fault.Action{Do: fault.Drop}})
	_, ch := f.client()
	msgs, err := ch.Consume(f.queue, "worker", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		t.Fatalf("a dropped delivery reached the consumer: %s", m.Body)
	case <-time.After(400 * time.Millisecond):
	}
	if err := a.Err(); err != nil || !a.Fired() {
		t.Fatalf("the trigger: %v", err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(2 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		got = f.stored()
	}
	if fmt.Sprint(got) != "[e1]" {
		t.Errorf("after the channel closed the queue held %v, want e1 requeued", got)
	}
}

func TestArmRefusesDuplicateAndDropWhereNotExact(t *testing.T) {
	f := newFixture(t)
	for _, tr := range []Trigger{
		{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: OpAck, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: OpDeliver, Action: fault.Action{Do: fault.Duplicate}},
		{Boundary: Request, Op: OpPublish, Action: fault.Action{Do: fault.Drop}},
	} {
		if _, err := f.proxy.Arm(tr); err == nil {
			t.Errorf("%v armed", tr)
		}
	}
}
