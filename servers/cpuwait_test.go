package servers

import (
	"testing"
	"time"
)

// Two busy descendants pinned to one CPU each wait for it about half the
// time: the service's count grows by as much. A sleeping service's does
// not. (No timed bound: a slower machine only makes the busy one wait
// more.)
func TestCPUWaitCountsTheRunQueue(t *testing.T) {
	busy, err := startSh(t, "echo up; taskset -c 0 sh -c 'while :; do :; done' & taskset -c 0 sh -c 'while :; do :; done' & wait", "up")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Kill(t.Context()) })
	idle, err := startSh(t, "echo up; exec sleep 30", "up")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idle.Kill(t.Context()) })
	before, ok := CPUWait(busy, idle)
	if !ok {
		t.Skip("this kernel keeps no run_delay (/proc/PID/task/TID/schedstat)")
	}
	deadline := time.Now().Add(time.Minute)
	for {
		time.Sleep(100 * time.Millisecond)
		after, ok := CPUWait(busy, idle)
		if !ok {
			t.Fatal("CPUWait: not read the second time")
		}
		grewBusy, grewIdle := after[0]-before[0], after[1]-before[1]
		if grewBusy >= 200*time.Millisecond && grewIdle < grewBusy/4 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: the pinned busy loops waited %v more, the sleeping service %v more", grewBusy, grewIdle)
		}
	}
}

// A service that ended has no processes: nothing waits.
func TestCPUWaitOfAnEndedService(t *testing.T) {
	s, err := startSh(t, "echo up; exec sleep 30", "up")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	if w, ok := CPUWait(s); ok && w[0] != 0 {
		t.Fatalf("an ended service waited %v", w[0])
	}
}

// What settling pays at its start for two services: one /proc scan and
// their threads' schedstat.
func BenchmarkCPUWait(b *testing.B) {
	var svcs []*Service
	for range 2 {
		s, err := StartService(b.Context(), ServiceSpec{Name: "svc", Argv: []string{"sh", "-c", "echo up; exec sleep 30"}, Dir: b.TempDir(), Ready: "up", ReadyTimeout: 3 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Kill(b.Context()) })
		svcs = append(svcs, s)
	}
	for b.Loop() {
		if _, ok := CPUWait(svcs...); !ok {
			b.Fatal("not read")
		}
	}
}
