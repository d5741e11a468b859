package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/scenario"
)

// With Adaptive, a session runs every scenario of a batch, never more at
// once than its controller allowed at most, and says what it chose.
func TestAdaptiveSessionKeepsToItsLimit(t *testing.T) {
	t.Parallel()
	var scs []*scenario.Scenario
	for i := range 8 {
		scs = append(scs, scenariotest.ParseOne(t, fmt.Sprintf("name: a%d\nsteps:\n  - produce: {amount: %d}\n  - sleep(for=300ms)\n  - relay\n", i, i+1)))
	}
	p := testParams(t)
	p.Parallel, p.Adaptive = 4, true
	s, err := OpenSession(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Pace() == nil {
		t.Fatal("an adaptive session without a controller")
	}
	rep, err := s.Run(context.Background(), scs)
	if err != nil || len(rep.Results) != len(scs) {
		t.Fatalf("ran %d of %d: %v", len(rep.Results), len(scs), err)
	}
	var spans [][2]time.Time
	for _, r := range rep.Results {
		if !r.Passed() {
			t.Fatalf("%s failed: %v", r.Scenario.Name, r.Failures)
		}
		first, last := r.Steps[0], r.Steps[len(r.Steps)-1]
		spans = append(spans, [2]time.Time{first.At, last.At.Add(last.Duration)})
	}
	st := s.Pace().Summary()
	most := 0
	for _, a := range spans {
		n := 0
		for _, b := range spans {
			if !b[0].After(a[0]) && b[1].After(a[0]) {
				n++
			}
		}
		most = max(most, n)
	}
	if most > st.Most || st.Ceiling != 4 || s.Pace().Area() <= 0 {
		t.Fatalf("%d scenarios ran at once; the controller: %s (Most %d, ceiling %d), area %.2f", most, st, st.Most, st.Ceiling, s.Pace().Area())
	}
}
