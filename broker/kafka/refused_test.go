package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
)

// A publish while the broker is down fails with the refusal as its cause
// (not the delivery timeout), and publishes again once the broker is back.
func TestPublishWhileEveryBrokerRefuses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	srv, err := kafkaserver.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Discard(context.Background()) })
	seeds, _ := Seeds(srv.URL())
	tp, err := New(ctx, seeds, "outboxdrill:refused", Options{Session: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Delete(context.Background()) })
	if err := srv.Halt(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = tp.Publish(ctx, []broker.Message{{EventID: "e1", Payload: "{}"}})
	if err == nil || !strings.Contains(err.Error(), "refused the connection") {
		t.Fatalf("publish to a stopped broker: %v; want the refusal", err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Publish(ctx, []broker.Message{{EventID: "e1", Payload: "{}"}}); err != nil {
		t.Fatalf("publish after the broker came back: %v", err)
	}
}
