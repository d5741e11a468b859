// Package testservers gives integration tests real PostgreSQL and Redis
// servers, started exactly as the runner starts them, once per test binary.
// RUNNER_PG_URL / RUNNER_REDIS_URL make the tests use existing servers.
package testservers

import (
	"context"
	"fmt"
	"os"
	"testing"

	"outboxdrill/servers"
)

// URLs of the servers the tests of this binary use.
var PGURL, RedisURL string

// Main starts the servers, runs the tests, stops the servers and exits.
// Use it as the body of TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	PGURL, RedisURL = os.Getenv("RUNNER_PG_URL"), os.Getenv("RUNNER_REDIS_URL")
	if PGURL == "" {
		pg, err := servers.StartPostgres(ctx, servers.PostgresOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "testservers:", err)
			return 1
		}
		defer pg.Stop(ctx)
		PGURL = pg.URL
	}
	if RedisURL == "" {
		rd, err := servers.StartRedis(ctx, servers.RedisOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "testservers:", err)
			return 1
		}
		defer rd.Stop(ctx)
		RedisURL = rd.URL
	}
	return m.Run()
}
