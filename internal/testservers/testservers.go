// Package testservers gives integration tests real PostgreSQL and Redis
// servers, started exactly as the runner starts them, at most once per test
// binary and only when a test asks (loader tests and fuzzing start none).
// RUNNER_PG_URL / RUNNER_REDIS_URL make the tests use existing servers.
package testservers

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"

	"outboxdrill/servers"
)

var (
	once      sync.Once
	pgURL     string
	redisURL  string
	startErr  error
	stopFuncs []func(context.Context) error
)

// Main runs the tests, then stops the servers if a test started them. Use it
// as the body of TestMain.
func Main(m *testing.M) {
	code := m.Run()
	for _, stop := range stopFuncs {
		_ = stop(context.Background())
	}
	os.Exit(code)
}

// URLs returns the servers' URLs, starting them on first use.
func URLs(t testing.TB) (pg, redis string) {
	t.Helper()
	once.Do(start)
	if startErr != nil {
		t.Fatalf("testservers: %v", startErr)
	}
	return pgURL, redisURL
}

// PG is the PostgreSQL admin URL; Redis the Redis URL.
func PG(t testing.TB) string    { pg, _ := URLs(t); return pg }
func Redis(t testing.TB) string { _, r := URLs(t); return r }

func start() {
	ctx := context.Background()
	pgURL, redisURL = os.Getenv("RUNNER_PG_URL"), os.Getenv("RUNNER_REDIS_URL")
	var wg sync.WaitGroup
	var pg *servers.Postgres
	var rd *servers.Redis
	var pgErr, rdErr error
	if pgURL == "" {
		wg.Go(func() { pg, pgErr = servers.StartPostgres(ctx, servers.PostgresOptions{}) })
	}
	if redisURL == "" {
		rd, rdErr = servers.StartRedis(ctx, servers.RedisOptions{})
	}
	wg.Wait()
	if pg != nil {
		pgURL = pg.URL
		stopFuncs = append(stopFuncs, pg.Stop)
	}
	if rd != nil {
		redisURL = rd.URL
		stopFuncs = append(stopFuncs, rd.Stop)
	}
	startErr = errors.Join(pgErr, rdErr)
}
