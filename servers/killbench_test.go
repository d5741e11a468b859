package servers

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
)

// bystanders starts n processes that are no service's (as the PostgreSQL
// backends of other explore points are), killed at the end.
func bystanders(b *testing.B, n int) {
	cmds := make([]*exec.Cmd, 0, n)
	b.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for range n {
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
}

// cpuTime is the CPU this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchDescendants is a service that leaves four descendants, each
// printing its pid: two children, a setsid'd child and a double-forked
// grandchild; on SIGTERM it exits at once (wait, not a foreground
// command, lets the trap run; what it waits for runs before it is ready).
const benchDescendants = `trap 'exit 0' TERM
sleep 1000 & echo "pid $!"
setsid sleep 1000 & echo "pid $!"
( sleep 1000 & echo "pid $!" )
sleep 1000 & last=$!; echo "pid $last"
echo ready; wait $last`

// BenchmarkServiceEnd starts a service with four descendants while 150
// unrelated processes run, and ends it (Kill, or Stop: SIGTERM, then the
// kill of what it left): ns/op and kill-cpu-ns/op are the end's alone (this
// process's CPU, /proc reads included), cpu-ns/op the whole iteration's
// (the start, and the subreaper's reaping after, too).
func BenchmarkServiceEnd(b *testing.B) {
	bystanders(b, 150)
	for _, end := range []string{"kill", "stop"} {
		b.Run(end, func(b *testing.B) {
			var endCPU time.Duration
			b.StopTimer()
			all := cpuTime()
			for range b.N {
				s, pids := startBench(b)
				c0 := cpuTime()
				b.StartTimer()
				if end == "kill" {
					_ = s.Kill(context.Background())
				} else if err := s.Stop(context.Background(), 5*time.Second); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				endCPU += cpuTime() - c0
				for _, p := range pids {
					if q, ok := readProc(p.pid); ok && q.start == p.start && q.alive() {
						b.Fatalf("descendant %d (%s) outlived the %s", p.pid, p.comm, end)
					}
				}
			}
			b.ReportMetric(float64(endCPU.Nanoseconds())/float64(b.N), "kill-cpu-ns/op")
			b.ReportMetric(float64((cpuTime()-all).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// startBench starts benchDescendants and returns it with its descendants.
func startBench(b *testing.B) (*Service, []procInfo) {
	s, err := StartService(context.Background(), ServiceSpec{Name: "bench", Argv: []string{"sh", "-c", benchDescendants},
		Dir: b.TempDir(), Ready: "ready", ReadyTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	var pids []procInfo
	for _, f := range strings.Split(s.Output(), "\n") {
		if n, err := strconv.Atoi(strings.TrimPrefix(f, "pid ")); err == nil {
			// Each runs sleep before the end starts: a SIGTERM that
			// reaches sh between its fork and exec may be lost.
			var p procInfo
			if !testutil.Eventually(func() bool { p, _ = readProc(n); return p.comm == "sleep" }) {
				b.Fatalf("descendant %d does not run sleep: %+v", n, p)
			}
			pids = append(pids, p)
		}
	}
	if len(pids) != 4 {
		b.Fatalf("%d descendants in %q", len(pids), s.Output())
	}
	return s, pids
}
