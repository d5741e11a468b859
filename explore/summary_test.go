package explore

import (
	"strings"
	"testing"
)

// A run that ended before its violations were shrunk (Ctrl-C, a budget)
// must not close with "no violation": the points say otherwise.
func TestSummaryNeverSaysNoViolationAfterOne(t *testing.T) {
	r := &Result{Observed: Verdict{Outcome: Held}, Points: []*Point{
		{Verdict: Verdict{Outcome: Held}}, {Verdict: Verdict{Outcome: Violated, Why: "lost"}}, {Verdict: Verdict{Outcome: NotRun, Why: "the run was interrupted before it ended"}},
	}}
	var b strings.Builder
	r.Summary(&b)
	if out := b.String(); strings.Contains(out, "no violation") || !strings.Contains(out, "1 point(s) violated an invariant") {
		t.Errorf("summary of a run with a violated point and no finding:\n%s", out)
	}
	r.Points[1].Outcome = Held
	b.Reset()
	r.Summary(&b)
	if out := b.String(); !strings.Contains(out, "no violation at the points that ran") {
		t.Errorf("summary of a run without a violation:\n%s", out)
	}
}
