package sysrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// readyOn is a service's ready: {on: …} as the system file loads it.
func readyOn(t *testing.T, on string) *fault.Fault {
	t.Helper()
	f, probs := fault.Watch(on, broker.Dialects(scenariotest.Kinds()))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	return f
}

// gated is a service that prints "started", waits for the file gate in
// its directory, then creates its group and reads once (XREADGROUP) with
// redis-cli through its proxy, and sleeps: ready only after that read.
func gated(t *testing.T, ready *fault.Fault, timeout time.Duration) (*Run, string) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not installed")
	}
	dir := t.TempDir()
	script := `echo started; while [ ! -e gate ]; do sleep 0.01; done
redis-cli -u "$REDIS_URL" XGROUP CREATE "$STREAM" g 0 MKSTREAM; redis-cli -u "$REDIS_URL" XREADGROUP GROUP g c COUNT 1 STREAMS "$STREAM" '>'; echo read; exec sleep 60`
	sys := &system.System{File: filepath.Join(dir, "system.yaml"), Dir: dir, Services: map[string]*system.Service{
		"consumer": {Name: "consumer", Run: []string{"sh", "-c", script}, Env: map[string]string{"REDIS_URL": "${broker.url}", "STREAM": "${stream}"}, ReadyOn: ready, ReadyTimeout: timeout},
	}}
	r := New(Config{System: sys, BrokerName: "redis", BrokerURL: testservers.Redis(t),
		ProducerURL: "postgres://u@127.0.0.1:5432/p", ConsumerURL: "postgres://u@127.0.0.1:5432/c",
		Vars: map[string]string{"stream": fmt.Sprintf("readyon-%d-%d", os.Getpid(), time.Now().UnixNano()), "consumer": "c"}})
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r, filepath.Join(dir, "gate")
}

// A service whose ready is on: broker.request(XREADGROUP) is ready at its
// first read, not when its process runs: the start step waits while the
// service waits for the gate, and returns once its proxy counted the read.
func TestReadyAtTheFirstCrossing(t *testing.T) {
	t.Parallel()
	r, gate := gated(t, readyOn(t, "broker.request(XREADGROUP)"), time.Minute)
	done := make(chan error, 1)
	var detail string
	go func() {
		var err error
		detail, err = r.Start(context.Background(), "consumer", nil, nil)
		done <- err
	}()
	for outs := r.Outputs(); len(outs) == 0 || !strings.Contains(outs[0].Text, "started"); outs = r.Outputs() {
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("the start returned (%v) while the service waited for its gate, before any XREADGROUP", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(detail, "; ready at its first broker.request(XREADGROUP)") {
		t.Errorf("detail %q: want the boundary it was ready at", detail)
	}
	// The proxy records a command with its reply, which may come after the
	// request the start was ready at.
	var ops []string
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(ops, "XREADGROUP") && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ops = ops[:0]
		for _, c := range r.Crossings() {
			ops = append(ops, c.Op)
		}
	}
	if !slices.Contains(ops, "XREADGROUP") {
		t.Errorf("crossings %v: want the XREADGROUP it was ready at", ops)
	}
}

// A crossing that never comes fails the start at its timeout, saying what
// it waited for and what the proxies saw instead.
func TestNeverReadyNamesTheCrossingsSeen(t *testing.T) {
	t.Parallel()
	r, gate := gated(t, readyOn(t, "broker.request(XACK)"), 500*time.Millisecond)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := r.Start(context.Background(), "consumer", nil, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "service consumer: no crossing of broker.request(XACK) (its proxies saw ") ||
		!strings.Contains(err.Error(), ") within 500ms; its output:\nstarted\n") {
		t.Fatalf("start: %v", err)
	}
	// What it read before the timeout is named (a machine slow enough to
	// start no redis-cli in 500ms read nothing yet: nothing to name).
	if strings.Contains(err.Error(), "\nread\n") && !strings.Contains(err.Error(), "(its proxies saw broker.XGROUP→ok ×1, broker.XREADGROUP→empty ×1)") {
		t.Errorf("start: %v\nwant the XGROUP and the XREADGROUP it crossed named", err)
	}
	if outs := r.Outputs(); len(outs) != 1 || !strings.HasPrefix(outs[0].Ended, "never ready: service consumer: no crossing of broker.request(XACK)") {
		t.Errorf("outputs %+v", outs)
	}
}

// A supervised restart waits for its own first crossing too: the process
// the supervisor starts after the first one died is the service's running
// one only once it read, not once it runs.
func TestRestartWaitsForItsOwnCrossing(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not installed")
	}
	r, gate := gated(t, readyOn(t, "broker.request(XREADGROUP)"), time.Minute)
	// The first process reads at once and exits; the next waits for the gate.
	svc := r.cfg.System.Services["consumer"]
	svc.Run = []string{"sh", "-c", `n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo "started $n"
[ $n = 1 ] || while [ ! -e gate ]; do sleep 0.01; done
redis-cli -u "$REDIS_URL" XGROUP CREATE "$STREAM" g 0 MKSTREAM; redis-cli -u "$REDIS_URL" XREADGROUP GROUP g c COUNT 1 STREAMS "$STREAM" '>'
[ $n = 1 ] && exit 1; exec sleep 60`}
	if _, err := r.StartSupervised(context.Background(), "consumer", nil, steps.StartFaults{Restart: true}); err != nil {
		t.Fatal(err)
	}
	running := func() *service {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.svcs["consumer"]
	}
	for outs := r.Outputs(); len(outs) < 2 || !strings.Contains(outs[1].Text, "started 2"); outs = r.Outputs() {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if s := running(); s != nil {
		if exited, _ := s.proc.Exited(); !exited {
			t.Fatalf("the restart (pid %d) runs as the service before its XREADGROUP", s.proc.PID())
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); running() == nil || running().inst.start != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restart was never ready after its XREADGROUP")
		}
	}
}

// A start fault on the very crossing the service is ready at does not hide
// it from the ready watch (a proxy stops at the first trigger that
// strikes): the read a delay holds for 5 s is counted as it crosses, so
// the start returns within its 3 s ready timeout.
func TestReadyAtACrossingAFaultHolds(t *testing.T) {
	t.Parallel()
	r, gate := gated(t, readyOn(t, "broker.request(XREADGROUP)"), 3*time.Second)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f, probs := fault.Load(fault.Spec{On: "broker.request(XREADGROUP)", Nth: 1, Do: "delay(5s)"}, broker.Dialects(scenariotest.Kinds()))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	if _, err := r.Start(context.Background(), "consumer", nil, f); err != nil {
		t.Fatalf("start with a delay on the crossing it is ready at: %v", err)
	}
}
