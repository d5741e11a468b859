package redisstream

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	"github.com/outboxdrill/runner/internal/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

func TestConformance(t *testing.T) {
	opt, err := redis.ParseURL(testservers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	brokertest.Run(t, Kind, func(t *testing.T, _ ...string) broker.Broker {
		s := New(rdb, "outboxdrill:test-"+rand.Text()[:10])
		t.Cleanup(func() {
			if err := s.Delete(context.Background()); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		return s
	})
}

// A team's entry layout: the event id and the payload in fields of its own
// naming, written and read back through them.
func TestWithFields(t *testing.T) {
	opt, err := redis.ParseURL(testservers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	s := New(rdb, "outboxdrill:test-"+rand.Text()[:10]).WithFields("ev", "body")
	t.Cleanup(func() { _ = s.Delete(ctx) })
	brokertest.Publish(t, s, "e1")
	raw, err := rdb.XRange(ctx, s.key, "-", "+").Result()
	if err != nil || len(raw) != 1 || raw[0].Values["ev"] != "e1" || raw[0].Values["body"] == nil || raw[0].Values[FieldEventID] != nil {
		t.Fatalf("entry %+v, %v; want fields ev and body only", raw, err)
	}
	ds, err := s.Read(ctx, "g", "w", 0, 0)
	if err != nil || len(ds) != 1 || ds[0].EventID != "e1" || ds[0].Payload == "" {
		t.Fatalf("read %+v, %v; want e1 with its payload", ds, err)
	}
	if ids, err := s.Events(ctx); err != nil || len(ids) != 1 || ids[0] != "e1" {
		t.Errorf("events %v, %v; want [e1]", ids, err)
	}
}
