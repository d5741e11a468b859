package testutil

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// ServerCtx is a test's context for starting and stopping servers: a
// minute at most, cancelled when the test ends.
func ServerCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// AssertGone checks that the server process is reaped and its dir removed.
func AssertGone(t *testing.T, pid int, dir string) {
	t.Helper()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still exists after Stop", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s still exists after Stop (stat: %v)", dir, err)
	}
}

// AssertOwnGroup checks the child leads its own process group, so a terminal
// Ctrl-C does not reach it.
func AssertOwnGroup(t *testing.T, pid int) {
	t.Helper()
	if pgid, err := syscall.Getpgid(pid); err != nil || pgid != pid {
		t.Errorf("pgid of %d = %d, %v; want its own group", pid, pgid, err)
	}
}

// Occupy holds a loopback port until the test ends, standing in for a
// process that wins the race for the port picked for a server.
func Occupy(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// Eventually polls cond for up to 3 s and reports whether it came true.
func Eventually(cond func() bool) bool {
	for deadline := time.Now().Add(3 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// Discarder is a started server: Discard kills it and removes its dir.
type Discarder interface {
	Discard(context.Context) error
}

// BenchStartDiscard reports how long start and Discard take apiece.
func BenchStartDiscard(b *testing.B, start func() (Discarder, error)) {
	var up, down time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := start()
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := s.Discard(context.Background()); err != nil {
			b.Fatal(err)
		}
		up, down = up+t1.Sub(t0), down+time.Since(t1)
	}
	b.ReportMetric(float64(up.Microseconds())/1000/float64(b.N), "start-ms/op")
	b.ReportMetric(float64(down.Microseconds())/1000/float64(b.N), "discard-ms/op")
}
