package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Allocated is how many bytes the process allocated while f ran (all
// goroutines: call it from a test that runs alone).
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Mark is a unique argument for a test's processes to carry (a number, so
// that `sleep MARK1` runs): the process id at a fixed width, so that no
// other test binary's mark is a prefix of it (1000.123 would be of
// 1000.1234), then slot, distinct for each caller in one test binary.
func Mark(slot int) string { return fmt.Sprintf("1000.%07d%d", os.Getpid(), slot) }

// Marked lists the live (not zombie) processes one of whose arguments
// after the first starts with mark: a unique argument such as "1000.4242"
// finds a test's own processes and no one else's.
func Marked(mark string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(st), ')')
		if strings.Contains(string(cmd), "\x00"+mark) && i > 0 && i+2 < len(st) && st[i+2] != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// Within runs f and fails the test at once if it has not returned within d:
// a read that blocks (a FIFO without a writer) must not hang the test.
func Within(t testing.TB, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %s", what, d)
	}
}
