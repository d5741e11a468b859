package explore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/system"
)

// The built-in workload's re-sends wait for the genuine events to go
// through where the broker redelivers entries one by one: a consumer
// killed before it applied ev-2 gets it back only after its claim's idle
// time, and a forged copy delivered first was applied by the correct Go
// payments consumer (phantom); the Node consumer on RabbitMQ nacked ev-2
// behind the forged copy it had prefetched; the Python Kafka relay marked
// ev-2 while its client still held the record.
func TestBuiltinResendsWaitForTheGenuineEvents(t *testing.T) {
	for b, wait := range map[string]string{"redis": "stream.lag: 0", "nats": "stream.lag: 0", "rabbitmq": "metrics.projection_lag: 0", "kafka": "metrics.projection_lag: 0"} {
		out := t.TempDir()
		if _, errs := Default(context.Background(), loadSystem(t), out, b); len(errs) > 0 {
			t.Fatal(errs)
		}
		body, err := os.ReadFile(filepath.Join(out, "workload.builtin"))
		if err != nil {
			t.Fatal(err)
		}
		resend := strings.Index(string(body), "publish: {event: ev-1}")
		before := string(body)[:max(resend, 0)]
		got := ""
		for _, w := range []string{"stream.lag: 0", "metrics.projection_lag: 0"} {
			if strings.Contains(before, w) {
				got = w
			}
		}
		if got != wait || resend < 0 {
			t.Errorf("%s: the re-sends wait on %q, want %q\n%s", b, got, wait, body)
		}
	}
}

// Shrinking that leaves an event out leaves its re-sends out with it: a
// re-send of an event never committed is a copy of nothing, applied as a
// phantom by every consumer (a file written so failed on the correct
// build: BUG=ack-first's phantom shrank to `publish: {event: ev-1}` alone).
func TestAResendIsLeftOutWithItsEvent(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	var resends []int
	for _, i := range w.Events {
		if w.calls[i].Def.Name == "publish" {
			resends = append(resends, i)
		}
	}
	if len(resends) != 2 || len(w.resends) != 2 {
		t.Fatalf("the built-in workload's re-sends: %v, tied %v", resends, w.resends)
	}
	v := variantOf(w, []element{{event: resends[0]}, {event: resends[1]}}, nil)
	for _, i := range resends {
		if !v.Drop[i] {
			t.Errorf("the re-send at step %d stays without the event it re-sends: %v", i, v.Drop)
		}
	}
	v = variantOf(w, []element{{event: w.resends[resends[0]]}, {event: resends[0]}}, nil)
	if v.Drop[resends[0]] || !v.Drop[resends[1]] {
		t.Errorf("with ev-1 kept its re-send stays, ev-2's goes: %v", v.Drop)
	}
}

// Two findings shrunk alike (the same first fault, the same invariants)
// are two files: the second overwrote the first, and a finding once
// written is rewritten in place (its FLAKY header).
func TestTwoFindingsShrunkAlikeAreTwoFiles(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	e := &explorer{p: Params{Out: out}}
	a, b := &Finding{Broken: []string{"phantom"}}, &Finding{Broken: []string{"phantom"}}
	for _, f := range []*Finding{a, b, a} {
		if err := e.write(w, f); err != nil {
			t.Fatal(err)
		}
	}
	if filepath.Base(a.File) != "explore-phantom.yaml" || filepath.Base(b.File) != "explore-phantom-2.yaml" {
		t.Errorf("files %s and %s, want explore-phantom.yaml and explore-phantom-2.yaml", a.File, b.File)
	}
}

// A system file with replicas: the built-in workload starts each replica
// (a start step of its own: a point faults one), and fills the outbox
// while they all run; a system without replicas keeps its workload.
func TestBuiltinWorkloadStartsTheReplicas(t *testing.T) {
	sys, errs, err := system.Load(context.Background(), "../examples/go-payments/system-replicas.yaml", scenariotest.Kinds())
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	w, errs := Default(context.Background(), sys, t.TempDir(), "redis")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var started []string
	for _, i := range w.Starts {
		started = append(started, w.Service(i))
	}
	if strings.Join(started, " ") != "relay-1 relay-2 consumer" {
		t.Errorf("started %v, want relay-1 relay-2 consumer", started)
	}
	// 3 produce, 1 produce_overlapping, 2 re-sends; and the burst of 8.
	if len(w.Events) != 6+8 {
		t.Errorf("%d event steps, want 14 (the burst of 8 while the replicas run)", len(w.Events))
	}
	if w := defaultWorkload(t, t.TempDir()); len(w.Events) != 6 {
		t.Errorf("without replicas: %d event steps, want 6", len(w.Events))
	}
}

// A workload's start of a replicated service is refused at its line: a
// point arms its fault on a start step, and a fault strikes one process.
func TestWorkloadStartsEachReplica(t *testing.T) {
	sys, errs, err := system.Load(context.Background(), "../examples/go-payments/system-replicas.yaml", scenariotest.Kinds())
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	_, errs = parseWorkload(context.Background(), "w.yaml", []byte("name: w\nsteps:\n  - produce: {event: e1}\n  - start: relay\n  - start: consumer\n"), sys)
	want := "w.yaml:4:5: start: relay starts 2 replicas: a workload starts each with a step of its own (start: relay-1, start: relay-2), so that a point can fault one"
	if len(errs) != 1 || errs[0].Error() != want {
		t.Errorf("errors %v, want %s", errs, want)
	}
}
