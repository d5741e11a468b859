package soak

import (
	"os"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/pace"
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
		c0 := treeCPU(b)
		raw, err := rawBaseline(b.Context(), w, events, 2, 100)
		c1 := treeCPU(b)
		w.Close()
		if err != nil {
			b.Fatal(err)
		}
		c2 := treeCPU(b)
		rep, err := Soak(b.Context(), Params{Events: events, Faults: 0.1, Seed: 1, Workers: 2, PGURL: tp.PGURL, Redis: tp.URLs[broker.Redis]})
		if err != nil || len(rep.Violations) > 0 {
			b.Fatal(err, rep.Violations)
		}
		c3 := treeCPU(b)
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

// treeCPU is the CPU seconds this test binary and its descendants (its
// servers, their reaped backends) used so far: pace's reading of /proc.
func treeCPU(b *testing.B) float64 {
	s, err := pace.ReadProc(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return s.CPU.Seconds()
}
