package soak

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/world"
)

// BenchmarkSoakAgainstRaw runs the raw baseline and the soak (2,000 events,
// faults 0.1, two workers) and reports, besides each one's events/s, the
// CPU each used per event on this machine: the test binary's own and its
// servers' (PostgreSQL with its backends, Redis). On a shared machine the
// wall-clock ratio swings with the neighbours' load; the CPU one is what
// the soak costs beyond the raw work. Servers given by RUNNER_PG_URL or
// RUNNER_REDIS_URL are not this process's: their CPU is not counted.
func BenchmarkSoakAgainstRaw(b *testing.B) {
	tp := testParams(b)
	const events = 2000
	var rawCPU, soakCPU, rawRate, soakRate float64
	for b.Loop() {
		w, err := world.Open(b.Context(), &world.Config{PGURL: tp.PGURL, URLs: tp.URLs, Parallel: 1}, world.Shape{Brokers: []string{broker.Redis}})
		if err != nil {
			b.Fatal(err)
		}
		c0 := treeCPU()
		raw, err := rawBaseline(b.Context(), w, events, 2, 100)
		c1 := treeCPU()
		w.Close()
		if err != nil {
			b.Fatal(err)
		}
		c2 := treeCPU()
		rep, err := Soak(b.Context(), Params{Events: events, Faults: 0.1, Seed: 1, Workers: 2, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]})
		if err != nil || len(rep.Violations) > 0 {
			b.Fatal(err, rep.Violations)
		}
		c3 := treeCPU()
		rawCPU, soakCPU = rawCPU+c1-c0, soakCPU+c3-c2
		rawRate, soakRate = rawRate+raw, soakRate+rep.EventsPerSec()
	}
	n := float64(b.N)
	b.ReportMetric(rawRate/n, "raw-events/s")
	b.ReportMetric(soakRate/n, "soak-events/s")
	b.ReportMetric(1000*rawCPU/n/events, "raw-cpu-ms/event")
	b.ReportMetric(1000*soakCPU/n/events, "soak-cpu-ms/event")
	b.ReportMetric(100*rawCPU/soakCPU, "raw/soak-cpu-%")
}

// treeCPU is the CPU seconds this process and its live descendants have
// used, each with the children it reaped (a backend that ended counts for
// its postmaster).
func treeCPU() float64 {
	type proc struct {
		ppid int
		cpu  float64
	}
	procs := map[int]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		var ticks float64
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			v, _ := strconv.ParseFloat(f[i], 64)
			ticks += v
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[pid] = proc{ppid: ppid, cpu: ticks / 100} // USER_HZ
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	total := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	self := os.Getpid()
	for pid, p := range procs {
		for a := p.ppid; pid != self && a > 1; a = procs[a].ppid {
			if a == self {
				total += p.cpu
				break
			}
		}
	}
	return total
}
