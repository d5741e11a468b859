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
	brokertest.Run(t, broker.Redis, func(t *testing.T, _ ...string) broker.Broker {
		s := New(rdb, "outboxdrill:test-"+rand.Text()[:10])
		t.Cleanup(func() {
			if err := s.Delete(context.Background()); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		return s
	})
}
