package runner

import (
	"context"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/scenario"
)

// BenchmarkScenario runs the seed scenarios, one per iteration, and splits
// each one's cost into isolation (two databases and a stream) and the
// scenario's own steps.
func BenchmarkScenario(b *testing.B) {
	files, _ := scenario.ExpandPaths([]string{"../scenarios"})
	scs, errs := scenario.LoadFiles(files, scenariotest.Kinds())
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	tp := testParams(b)
	tp.Timeout = time.Minute
	s, err := OpenSession(context.Background(), tp)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	p, w := s.p, s.w
	var setup, total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := runScenario(context.Background(), &p, w, job{sc: scs[i%len(scs)], broker: broker.Redis})
		if err != nil || !res.Passed() {
			b.Fatalf("%v %v", err, res.Failures)
		}
		setup += res.Setup
		total += res.Duration
	}
	b.ReportMetric(float64(setup.Microseconds())/float64(b.N)/1000, "setup-ms/op")
	b.ReportMetric(float64((total-setup).Microseconds())/float64(b.N)/1000, "steps+cleanup-ms/op")
}
