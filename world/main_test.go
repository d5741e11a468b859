package world

import (
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
)

func TestMain(m *testing.M) {
	// Most tests wait on servers, not on the CPU: without an explicit
	// -parallel, run 8 at once even where GOMAXPROCS is smaller.
	testservers.Parallel(8)
	testservers.Main(m)
}

// testConfig is the test servers: PostgreSQL and Redis.
func testConfig(t testing.TB) Config {
	return Config{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}
}

// redisOnly is the shape of a world on Redis alone.
var redisOnly = Shape{Brokers: []string{broker.Redis}}
