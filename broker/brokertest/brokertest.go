// Package brokertest is the conformance suite of broker.Broker: what the
// pipeline relies on from any broker, and honesty about what a broker
// cannot do (an operation outside its capabilities says so). Each broker's
// package runs it from one test, so a new broker is checked the day it is
// written.
package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
)

// Factory makes a fresh, empty broker whose consumer groups include groups
// (a broker that must declare them up front does so), and deletes it when
// the test ends.
type Factory func(t *testing.T, groups ...string) broker.Broker

// Run runs the suite, each case a subtest of t, so that one
// case runs alone:
//
//	go test ./broker/redisstream/ -run 'Conformance/claim'
//
// Claims may take as long as the broker's redelivery delay (JetStream's
// AckWait); everything is bounded.
//
// A case that needs a capability the broker lacks is skipped, citing the
// broker's documented reason (kind.Limits). The kind is passed, not looked
// up: a broker package's own tests do not register it (broker/kinds).
func Run(t *testing.T, kind *broker.Kind, newBroker Factory) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs != "" && !newBroker(t).Capabilities().Has(tc.needs) {
				why := kind.Limits[tc.needs]
				if why == "" {
					t.Fatalf("%s lacks %s without citing why (its Kind.Limits)", kind.Name, tc.needs)
				}
				t.Skipf("%s lacks %s: %s", kind.Name, tc.needs, why)
			}
			tc.run(t, newBroker)
		})
	}
}

// cases are the suite, in the order Run runs them.
var cases = []struct {
	name  string
	run   func(*testing.T, Factory)
	needs broker.Capability // "" for every broker
}{
	{"publish-read-ack", publishReadAck, ""},
	{"every-group-gets-every-message", everyGroup, ""},
	{"read-waits-at-most-block", readBlock, ""},
	{"entry-log-counts-every-publish", entryLog, ""},
	{"claim-takes-over-an-unacked-entry", claim, broker.ClaimByIdle}, // from a live worker
	{"nack-gives-the-entry-back", nack, ""},
	{"crash-gives-back-what-the-worker-held", crash, ""},
	{"dead-letters-round-trip", deadLetters, ""},
	{"lag-counts-what-a-group-has-not-finished", lag, broker.GroupLag},
	{"unsupported-says-so", unsupported, ""},
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// Messages are messages with the given event ids and payloads derived from them.
func Messages(ids ...string) []broker.Message {
	out := make([]broker.Message, len(ids))
	for i, id := range ids {
		out[i] = broker.Message{EventID: id, Payload: fmt.Sprintf(`{"event_id":%q}`, id)}
	}
	return out
}

// Publish publishes ids and fails the test unless every one got an entry id.
func Publish(t *testing.T, b broker.Broker, ids ...string) []string {
	t.Helper()
	got, err := b.Publish(ctx(t), Messages(ids...))
	if err != nil || len(got) != len(ids) {
		t.Fatalf("publish %v: %v, %v", ids, got, err)
	}
	return got
}

// EventIDs are the deliveries' event ids, in order.
func EventIDs(ds []broker.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EventID
	}
	return out
}

func publishReadAck(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g")
	Publish(t, b, "e1", "e2", "e3")
	ds, err := b.Read(ctx(t), "g", "w1", 0, time.Second)
	if err != nil || !slices.Equal(EventIDs(ds), []string{"e1", "e2", "e3"}) {
		t.Fatalf("read: %v, %v; want e1 e2 e3 in publish order", EventIDs(ds), err)
	}
	for _, d := range ds {
		if d.Payload != Messages(d.EventID)[0].Payload || d.Deliveries != firstDelivery(b) || d.ID == "" {
			t.Errorf("delivery %+v: want its payload, an entry id, a first delivery (%d)", d, firstDelivery(b))
		}
	}
	countPending(t, b, "g", 3)
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	if err := b.Ack(ctx(t), "g", ids...); err != nil {
		t.Fatal(err)
	}
	countPending(t, b, "g", 0)
	if again, err := b.Read(ctx(t), "g", "w1", 0, 100*time.Millisecond); err != nil || len(again) != 0 {
		t.Errorf("read after ack: %v, %v; want nothing new", EventIDs(again), err)
	}
}

// firstDelivery is the delivery count of a first delivery: 1, or 0 (not
// known) on a broker that counts none.
func firstDelivery(b broker.Broker) int {
	if b.Capabilities().Has(broker.DeliveryCount) {
		return 1
	}
	return 0
}

// countPending checks the group's pending count where the broker has one.
func countPending(t *testing.T, b broker.Broker, group string, want int64) {
	t.Helper()
	if !b.Capabilities().Has(broker.PendingCount) {
		return
	}
	got, err := b.Pending(ctx(t))
	if err != nil || got[group] != want {
		t.Errorf("pending of %s: %v, %v; want %d", group, got, err, want)
	}
}

func everyGroup(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g1", "g2")
	Publish(t, b, "e1", "e2")
	for _, g := range []string{"g1", "g2"} {
		ds, err := b.Read(ctx(t), g, "w", 0, time.Second)
		if err != nil || !slices.Equal(EventIDs(ds), []string{"e1", "e2"}) {
			t.Errorf("group %s read %v, %v; want e1 e2", g, EventIDs(ds), err)
		}
	}
}

func readBlock(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g")
	start := time.Now()
	ds, err := b.Read(ctx(t), "g", "w", 0, 200*time.Millisecond)
	if took := time.Since(start); err != nil || len(ds) != 0 || took > 5*time.Second {
		t.Errorf("empty read: %v, %v after %s; want nothing, soon after 200ms", EventIDs(ds), err, took)
	}
}

func entryLog(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g")
	if !b.Capabilities().Has(broker.EntryLog) {
		t.Skip("no entry_log")
	}
	Publish(t, b, "e1", "e2")
	// A deliberate second publish of e1 (a replay): every broker stores it.
	if _, err := b.Publish(ctx(t), []broker.Message{{EventID: "e1", Payload: Messages("e1")[0].Payload, Republish: true}}); err != nil {
		t.Fatal(err)
	}
	n, err := b.Entries(ctx(t))
	evs, err2 := b.Events(ctx(t))
	if err != nil || err2 != nil || n != 3 || !slices.Equal(evs, []string{"e1", "e2", "e1"}) {
		t.Errorf("entries %d (%v), events %v (%v); want 3 and e1 e2 e1", n, err, evs, err2)
	}
}

func claim(t *testing.T, newBroker Factory) {
	takeBack(t, newBroker, "alive", func(broker.Broker, broker.Delivery) error { return nil })
}

// nack: a nacked entry comes back to the group (at once where the broker
// redelivers on a nack; Redis Streams keeps it pending for the claim; a
// Kafka consumer seeks back to it), here to the worker that nacked it.
func nack(t *testing.T, newBroker Factory) {
	takeBack(t, newBroker, "dead", func(b broker.Broker, d broker.Delivery) error { return b.Nack(ctx(t), "g", d.ID) })
}

// crash: what a crashed worker held comes back to another worker.
func crash(t *testing.T, newBroker Factory) {
	takeBack(t, newBroker, "alive", func(b broker.Broker, _ broker.Delivery) error { return b.Crash(ctx(t), "g", "dead") })
}

// GiveBackWithin bounds how long a case waits for the broker to give an
// unacked entry back: as long as its redelivery delay (JetStream's AckWait)
// needs. The suite's own test shortens it for the Redis brokers it breaks
// on purpose: Redis gives an entry back at once when it does at all.
var GiveBackWithin = 5 * time.Second

// takeBack: worker "dead" reads e1 and does not ack it; after giveUp,
// worker taker claims it (as often as the broker's redelivery delay
// needs), a second delivery of the same entry (counted so where the broker
// counts deliveries), and acks it.
func takeBack(t *testing.T, newBroker Factory, taker string, giveUp func(broker.Broker, broker.Delivery) error) {
	b := newBroker(t, "g")
	Publish(t, b, "e1")
	first, err := b.Read(ctx(t), "g", "dead", 0, time.Second)
	if err != nil || len(first) != 1 {
		t.Fatalf("read: %v, %v", EventIDs(first), err)
	}
	if err := giveUp(b, first[0]); err != nil {
		t.Fatal(err)
	}
	var got []broker.Delivery
	for deadline := time.Now().Add(GiveBackWithin); len(got) == 0 && time.Now().Before(deadline); {
		got, err = b.Claim(ctx(t), "g", taker, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			time.Sleep(10 * time.Millisecond) // a claim that finds nothing returns at once
		}
	}
	counted := b.Capabilities().Has(broker.DeliveryCount)
	if len(got) != 1 || got[0].ID != first[0].ID || got[0].EventID != "e1" || (counted && got[0].Deliveries < 2) {
		t.Fatalf("claim: %+v; want entry %s (e1) delivered a second time", got, first[0].ID)
	}
	if err := b.Ack(ctx(t), "g", got[0].ID); err != nil {
		t.Fatal(err)
	}
	countPending(t, b, "g", 0)
}

func deadLetters(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g")
	dl := broker.DeadLetter{EventID: "e1", Payload: `{"event_id":"e1"}`, Reason: "poison", EntryID: "7", Deliveries: 3}
	if err := b.DeadLetter(ctx(t), dl); err != nil {
		t.Fatal(err)
	}
	got, err := b.DeadLetters(ctx(t))
	if err != nil || len(got) != 1 || got[0] != dl {
		t.Fatalf("dead letters %+v, %v; want %+v", got, err, dl)
	}
	taken, err := b.TakeDeadLetters(ctx(t))
	left, err2 := b.DeadLetters(ctx(t))
	if err != nil || err2 != nil || len(taken) != 1 || taken[0] != dl || len(left) != 0 {
		t.Errorf("take: %+v (%v), left %+v (%v); want it once, then none", taken, err, left, err2)
	}
}

// lag: of three entries, a group read two and acked the first: one is not
// delivered yet and one not acknowledged, so two are not finished with.
// A broker that acknowledges by position (Kafka) counts the same.
func lag(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g")
	Publish(t, b, "e1", "e2", "e3")
	ds, err := b.Read(ctx(t), "g", "w1", 2, time.Second)
	if err != nil || len(ds) != 2 {
		t.Fatalf("read 2: %v, %v", EventIDs(ds), err)
	}
	if err := b.Ack(ctx(t), "g", ds[0].ID); err != nil {
		t.Fatal(err)
	}
	lb, ok := b.(broker.Lagging)
	if !ok {
		t.Fatalf("%T declares %s but is no broker.Lagging", b, broker.GroupLag)
	}
	got, err := lb.Lag(ctx(t))
	if err != nil || got["g"] != 2 {
		t.Errorf("lag %v, %v; want g: 2 (e2 unacknowledged, e3 not delivered)", got, err)
	}
}

// unsupported: an operation that needs a capability the broker does not
// declare must say so, never answer with a made-up value.
func unsupported(t *testing.T, newBroker Factory) {
	b := newBroker(t, "g")
	caps := b.Capabilities()
	for _, op := range []struct {
		needs broker.Capability
		call  func() error
	}{
		{broker.PendingCount, func() error { _, err := b.Pending(ctx(t)); return err }},
		{broker.Purge, func() error { _, err := b.Trim(ctx(t), 0); return err }},
		{broker.Retention, func() error { _, err := b.Trim(ctx(t), 1); return err }},
		{broker.EntryLog, func() error { _, err := b.Entries(ctx(t)); return err }},
	} {
		err := op.call()
		switch {
		case caps.Has(op.needs) && err != nil:
			t.Errorf("%s declared, but: %v", op.needs, err)
		case !caps.Has(op.needs) && !errors.Is(err, broker.ErrUnsupported):
			t.Errorf("%s not declared, yet the operation answered %v", op.needs, err)
		}
	}
}
