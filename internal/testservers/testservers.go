// Package testservers gives integration tests real PostgreSQL, Redis, NATS
// and RabbitMQ servers, and a Kafka-protocol server (kfake), started exactly as the runner starts them, at most
// once per test binary and only when a test asks (loader tests and fuzzing
// start none). The runner's own variables make the tests use existing
// servers instead, one name per server: RUNNER_PG_URL, RUNNER_REDIS_URL,
// RUNNER_NATS_URL, RUNNER_RABBITMQ_URL, RUNNER_KAFKA_URL.
package testservers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/servers"
)

var (
	once      sync.Once
	pgURL     string
	redisURL  string
	startErr  error
	stopFuncs []func(context.Context) error
	// inMain: the test binary runs under Main, which removes what start
	// started. Without it the servers' dirs would outlive the tests.
	inMain bool
)

// Main runs the tests, then discards the servers if a test started them
// (killed and removed: a clean shutdown would only write data about to be
// deleted). Use it as the body of TestMain.
func Main(m *testing.M) {
	servers.ServeKfakeChild() // this binary re-executed as the Kafka server
	inMain = true
	code := m.Run()
	for _, stop := range stopFuncs {
		_ = stop(context.Background())
	}
	os.Exit(code)
}

// requireMain fails a test whose binary does not run under Main: the
// servers it would start would outlive it.
func requireMain(t testing.TB) {
	t.Helper()
	if !inMain {
		t.Fatal("testservers: this package's TestMain must call testservers.Main(m), which removes the servers it starts")
	}
}

// URLs returns the servers' URLs, starting them on first use.
func URLs(t testing.TB) (pg, redis string) {
	t.Helper()
	requireMain(t)
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
		stopFuncs = append(stopFuncs, pg.Discard)
	}
	if rd != nil {
		redisURL = rd.URL
		stopFuncs = append(stopFuncs, rd.Discard)
	}
	startErr = errors.Join(pgErr, rdErr)
}

var (
	natsOnce, rabbitOnce sync.Once
	natsURL, rabbitURL   string
	natsErr, rabbitErr   error
)

// SkipAbsentEnv, set to 1, lets a test that needs an absent broker skip
// instead of failing (local runs only: CI must have them all).
const SkipAbsentEnv = "OUTBOXDRILL_SKIP_ABSENT"

// Brokers returns the NATS and RabbitMQ URLs for the broker matrix (see
// NATS and RabbitMQ).
func Brokers(t testing.TB) (nats, rabbitmq string) {
	t.Helper()
	return NATS(t), RabbitMQ(t)
}

// NATS is RUNNER_NATS_URL, else a nats-server started like the runner
// starts it.
func NATS(t testing.TB) string {
	t.Helper()
	requireMain(t)
	natsOnce.Do(func() {
		if natsURL = os.Getenv("RUNNER_NATS_URL"); natsURL != "" {
			return
		}
		n, err := servers.StartNATS(context.Background(), servers.NATSOptions{})
		if err != nil {
			natsErr = fmt.Errorf("NATS: %w", err)
			return
		}
		natsURL = n.URL()
		stopFuncs = append(stopFuncs, n.Discard)
	})
	Absent(t, natsErr)
	return natsURL
}

// devRabbitMQ is the RabbitMQ server the development machines and CI run.
const devRabbitMQ = "amqp://guest:guest@127.0.0.1:5672/"

// RabbitMQ is RUNNER_RABBITMQ_URL, else the development server on
// 127.0.0.1:5672 when it answers, else a node started like the runner
// starts it (6–13 s).
func RabbitMQ(t testing.TB) string {
	t.Helper()
	requireMain(t)
	rabbitOnce.Do(func() {
		if rabbitURL = os.Getenv("RUNNER_RABBITMQ_URL"); rabbitURL != "" {
			return
		}
		if c, err := amqp.DialConfig(devRabbitMQ, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)}); err == nil {
			c.Close()
			rabbitURL = devRabbitMQ
			return
		}
		r, err := servers.StartRabbitMQ(context.Background(), servers.RabbitMQOptions{})
		if err != nil {
			rabbitErr = fmt.Errorf("RabbitMQ: none at %s and none could be started: %w", devRabbitMQ, err)
			return
		}
		rabbitURL = r.URL()
		stopFuncs = append(stopFuncs, r.Discard)
	})
	Absent(t, rabbitErr)
	return rabbitURL
}

// Absent fails the test with err, the reason a broker is missing, or skips
// it when OUTBOXDRILL_SKIP_ABSENT=1. A nil err does nothing.
func Absent(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(SkipAbsentEnv) == "1" {
		t.Skipf("testservers: %v (skipped: %s=1)", err, SkipAbsentEnv)
	}
	t.Fatalf("testservers: %v (set %s=1 to skip locally)", err, SkipAbsentEnv)
}

var (
	kafkaOnce sync.Once
	kafkaURL  string
	kafkaErr  error
)

// Kafka is RUNNER_KAFKA_URL (host:port), else franz-go's kfake started as
// the runner starts it: this test binary re-executed (Main serves it).
func Kafka(t testing.TB) string {
	t.Helper()
	requireMain(t)
	kafkaOnce.Do(func() {
		if kafkaURL = os.Getenv("RUNNER_KAFKA_URL"); kafkaURL != "" {
			return
		}
		k, err := servers.StartKafka(context.Background())
		if err != nil {
			kafkaErr = fmt.Errorf("Kafka (kfake): %w", err)
			return
		}
		kafkaURL = k.URL()
		stopFuncs = append(stopFuncs, k.Discard)
	})
	Absent(t, kafkaErr)
	return kafkaURL
}
