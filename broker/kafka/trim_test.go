package kafka

import (
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker/brokertest"
)

// Records deleted before the group reached them are gone for it, even if
// the worker's client had fetched them ahead of what it handed out.
func TestDeletedRecordsAreNotDelivered(t *testing.T) {
	t.Parallel()
	tp := newTopic(t, Options{})
	brokertest.Publish(t, tp, "e1", "e2", "e3")
	ds, err := tp.Read(testCtx(t), "g", "w", 1, 200*time.Millisecond)
	if err != nil || len(ds) != 1 {
		t.Fatalf("read 1: %v %v", brokertest.EventIDs(ds), err)
	}
	if err := tp.Ack(testCtx(t), "g", ds[0].ID); err != nil {
		t.Fatal(err)
	}
	n, err := tp.Trim(testCtx(t), 0)
	if err != nil || n != 3 {
		t.Fatalf("trim: %d %v", n, err)
	}
	if left, err := tp.Entries(testCtx(t)); err != nil || left != 0 {
		t.Fatalf("entries after trim: %d %v", left, err)
	}
	if got := read(t, tp, "w"); len(got) != 0 {
		t.Fatalf("read after the trim: %v; want nothing", got)
	}
}
