// Package testservers gives integration tests a real PostgreSQL and a
// server of every broker kind (broker.Kind: Redis, NATS, RabbitMQ, and
// kfake for Kafka), started exactly as the runner starts them, at most once
// per test binary and only when a test asks (loader tests and fuzzing start
// none). The runner's own variables make the tests use existing servers
// instead, one name per server: RUNNER_PG_URL and each kind's Env
// (RUNNER_REDIS_URL, RUNNER_NATS_URL, RUNNER_RABBITMQ_URL, RUNNER_KAFKA_URL).
package testservers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/servers"
)

var (
	once     sync.Once
	pgURL    string
	redisURL string
	startErr error
	// stopFuncs remove what the package started; brokers start in
	// parallel tests, so appends hold stopMu.
	stopFuncs []func(context.Context) error
	stopMu    sync.Mutex
	// inMain: the test binary runs under Main, which removes what start
	// started. Without it the servers' dirs would outlive the tests.
	inMain bool
)

// Main runs the tests, then discards the servers if a test started them
// (killed and removed: a clean shutdown would only write data about to be
// deleted). Use it as the body of TestMain.
func Main(m *testing.M) {
	kafkaserver.ServeChild() // this binary re-executed as the Kafka server
	inMain = true
	if parallel > 0 {
		testutil.DefaultParallel(parallel)
	}
	code := m.Run()
	stopMu.Lock()
	defer stopMu.Unlock()
	for _, stop := range stopFuncs {
		_ = stop(context.Background())
	}
	os.Exit(code)
}

// parallel is Parallel's n: 0, -test.parallel's own default.
var parallel int

// Parallel, called before Main, runs up to n parallel tests at once
// unless -test.parallel says otherwise (its default is GOMAXPROCS, when
// the package's parallel tests mostly wait: on services, on the servers,
// on a scenario's within:). n below GOMAXPROCS changes nothing.
func Parallel(n int) { parallel = n }

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
	var rd *redisserver.Server
	var pgErr, rdErr error
	if pgURL == "" {
		wg.Go(func() { pg, pgErr = servers.StartPostgres(ctx, servers.PostgresOptions{}) })
	}
	if redisURL == "" {
		rd, rdErr = redisserver.Start(ctx, redisserver.Options{})
	}
	wg.Wait()
	if pg != nil {
		pgURL = pg.URL
		deferStop(pg.Discard)
	}
	if rd != nil {
		redisURL = rd.URL
		deferStop(rd.Discard)
	}
	startErr = errors.Join(pgErr, rdErr)
}

// deferStop has Main run fn after the tests.
func deferStop(fn func(context.Context) error) {
	stopMu.Lock()
	stopFuncs = append(stopFuncs, fn)
	stopMu.Unlock()
}

// SkipAbsentEnv, set to 1, lets a test that needs an absent broker skip
// instead of failing (local runs only: CI must have them all).
const SkipAbsentEnv = "OUTBOXDRILL_SKIP_ABSENT"

// brokerServer is one kind's server for the whole test binary.
type brokerServer struct {
	once sync.Once
	url  string
	err  error
}

var (
	brokersMu sync.Mutex
	brokers   = map[string]*brokerServer{}
)

// Broker is the URL of a server of kind k for the tests: k.Env when set,
// else k.Local when it answers, else k's own server started as the runner
// starts it (k.Start). Redis, the kind whose own server is redisserver's,
// is the server URLs starts beside PostgreSQL. A broker package's tests
// pass their own Kind: they do not register it.
func Broker(t testing.TB, k *broker.Kind) string {
	t.Helper()
	if k.Dir == redisserver.Dir {
		return Redis(t)
	}
	requireMain(t)
	brokersMu.Lock()
	s := brokers[k.Name]
	if s == nil {
		s = &brokerServer{}
		brokers[k.Name] = s
	}
	brokersMu.Unlock()
	s.once.Do(func() { s.url, s.err = startBroker(k) })
	Absent(t, s.err)
	return s.url
}

// URL is Broker for the registered kind named name (a test binary that
// links broker/kinds).
func URL(t testing.TB, name string) string {
	t.Helper()
	k, ok := broker.Lookup(name)
	if !ok {
		t.Fatalf("testservers: no broker kind %q is registered (import broker/kinds)", name)
	}
	return Broker(t, k)
}

func startBroker(k *broker.Kind) (string, error) {
	if url := os.Getenv(k.Env); url != "" {
		return url, nil
	}
	ctx := context.Background()
	if k.Local != "" && answers(ctx, k, k.Local) {
		return k.Local, nil
	}
	url, _, err := k.Start(ctx, host{})
	if err != nil {
		return "", fmt.Errorf("%s: none at %s and none could be started: %w", k.Title, cmp.Or(redact.URL(k.Local), k.Env), err)
	}
	return url, nil
}

// answers reports whether k's server at url takes a connection.
func answers(ctx context.Context, k *broker.Kind, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var h Host
	_, err := k.Open(ctx, &h, url, nil)
	h.Close()
	return err == nil
}

// host is the broker.Host of a server the tests start: removed by Main.
type host struct{}

func (host) Defer(fn func(context.Context) error)     { deferStop(fn) }
func (host) DeferStop(fn func(context.Context) error) { deferStop(fn) }
func (host) Logf(string, ...any)                      {}
func (host) SetURL(string)                            {}
func (host) SetLabel(string)                          {}

// Host is the broker.Host of a connection a test opens as a run would
// (or only tries): Close undoes what the run would, newest first.
type Host struct{ fns []func(context.Context) error }

func (h *Host) Defer(fn func(context.Context) error)     { h.fns = append(h.fns, fn) }
func (h *Host) DeferStop(fn func(context.Context) error) { h.fns = append(h.fns, fn) }
func (*Host) Logf(string, ...any)                        {}
func (*Host) SetURL(string)                              {}
func (*Host) SetLabel(string)                            {}

// Close runs what Defer registered, newest first.
func (h *Host) Close() {
	for i := len(h.fns) - 1; i >= 0; i-- {
		_ = h.fns[i](context.Background())
	}
	h.fns = nil
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
