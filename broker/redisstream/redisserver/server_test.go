package redisserver

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/servers"
)

func TestServer(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	start := time.Now()
	r, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started in %v at %s (pid %d, dir %s)", time.Since(start), r.URL, r.PID(), r.Dir)
	pid, dir := r.PID(), r.Dir
	t.Cleanup(func() { r.Stop(context.Background()) })
	testutil.AssertOwnGroup(t, pid)

	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET k = %q, %v; want v", got, err)
	}
	for name, want := range map[string]string{"appendonly": "yes", "appendfsync": "always", "save": ""} {
		if got, err := rdb.ConfigGet(ctx, name).Result(); err != nil || got[name] != want {
			t.Errorf("CONFIG GET %s = %q, %v; want %q", name, got[name], err, want)
		}
	}

	// Concurrent Stops: both return once the server is gone.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = r.Stop(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	testutil.AssertGone(t, pid, dir)
	if err := r.Stop(ctx); err != nil {
		t.Errorf("third Stop: %v", err)
	}
}

func TestStopWithCancelledContextKills(t *testing.T) {
	r, err := Start(testutil.ServerCtx(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := r.PID(), r.Dir
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.AssertGone(t, pid, dir)
}

// TestStartAfterStop checks a stopped server stays stopped: Start refuses
// instead of launching a process nobody would stop.
func TestStartAfterStop(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	r, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Discard(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err == nil || r.PID() != 0 {
		t.Errorf("Start after Discard: %v, pid %d; want an error and nothing running", err, r.PID())
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := Start(testutil.ServerCtx(t), Options{Binary: "/nonexistent/redis-server"})
	var mb *servers.MissingBinaryError
	if !errors.As(err, &mb) {
		t.Fatalf("got %v (%T), want *MissingBinaryError", err, err)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{`"redis-server"`, "apt-get install", "RUNNER_REDIS_URL"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %s: %s", want, msg)
		}
	}
}

// TestLostPortRaceDetected checks redis-server's bind failure is
// recognised, so start retries it on a new port.
func TestLostPortRaceDetected(t *testing.T) {
	ctx := testutil.ServerCtx(t)
	bin, err := findRedis("")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := newServer(bin, dir).launch(ctx, testutil.Occupy(t)); !servers.LostPortRace(err) {
		t.Fatalf("launch on a busy port: %v; want a lost port race", err)
	}
}

func BenchmarkStart(b *testing.B) {
	ctx := testutil.ServerCtx(b)
	testutil.BenchStartDiscard(b, func() (testutil.Discarder, error) { return Start(ctx, Options{}) })
}
