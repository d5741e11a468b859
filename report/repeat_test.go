package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/report/htmlreport"
	"github.com/outboxdrill/runner/steps"
)

// TestRepeatsAggregate: the runs of a --repeat, as recorded results on two
// brokers, are counted per scenario and broker; a mix is flaky, named in
// the summary with its counts and in the matrices for all its runs, not
// as its last run's pass.
func TestRepeatsAggregate(t *testing.T) {
	flaky := scenariotest.ParseOne(t, "name: flaky one\nsteps:\n  - produce\n")
	steady := scenariotest.ParseOne(t, "name: steady one\nsteps:\n  - produce\n")
	fail := []steps.Failure{{Key: "inbox.rows", Msg: "want 1, got 0"}}
	rep := &report.Report{Brokers: []string{"redis", "nats"}}
	add := func(sc *steps.Failure, b string, run int) {
		r := &report.Result{Scenario: flaky, Broker: b, Matrix: true, Run: run, Runs: 3}
		if sc != nil {
			r.Failures = fail
		}
		rep.Results = append(rep.Results, r)
	}
	add(nil, "redis", 1)
	add(&fail[0], "redis", 2)
	add(nil, "redis", 3) // flaky on redis, its last run a pass
	for run := 1; run <= 3; run++ {
		add(nil, "nats", run)
		rep.Results = append(rep.Results, &report.Result{Scenario: steady, Broker: "redis", Matrix: true, Run: run, Runs: 3, Failures: fail})
	}
	reps := rep.Repeats()
	var got []string
	for _, f := range reps {
		got = append(got, f.Name+": "+f.String())
	}
	want := []string{"flaky one [redis]: 2/3 passed, 1 failed (first: run 2)", "flaky one [nats]: 3/3 passed", "steady one [redis]: 0/3 passed, 3 failed (first: run 1)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || !reps[0].Flaky() || reps[1].Flaky() || reps[2].Flaky() {
		t.Errorf("repeats:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	sum := rep.Summary()
	for _, w := range []string{"flaky: flaky one [redis] (t.yaml): 2/3 passed, 1 failed (first: run 2)\n",
		"failed every run: steady one [redis] (t.yaml): 0/3 passed, 3 failed",
		"repeat: 3 scenario(s) × 3 runs: 1 flaky, 1 passed every run, 1 failed every run, 0 skipped every run\n",
		"FAIL: 5 passed, 4 failed, 9 scenarios"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary lacks %q:\n%s", w, sum)
		}
	}
	var md bytes.Buffer
	if err := report.WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| flaky one | ⚠️ **flaky**: 2/3 passed, 1 failed (first: run 2) | ✅ pass (3/3 runs) |") ||
		!strings.Contains(md.String(), "| steady one | ❌ **FAIL** (3/3 runs) | not run |") {
		t.Errorf("markdown matrix:\n%s", md.String())
	}
	page, err := htmlreport.Render(rep, htmlreport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "flaky: 2/3 passed, 1 failed (first: run 2)") {
		t.Errorf("the HTML matrix does not show the flaky cell")
	}
}
