package main

import (
	"strings"
	"testing"
)

// produce_overlapping's outcomes can fail: on a team's system (it runs the
// team's produce: statement) the correct relay publishes the second event
// while the first's transaction is open, so committed 2 and
// published_between 1 hold; each with a wrong value fails naming its key
// with a want/got diff. (The reference pipeline's every-key test cannot
// run it: it needs a system file.)
func TestProduceOverlappingOutcomesCanFail(t *testing.T) {
	t.Parallel()
	python := pythonReady(t)
	if !python {
		t.Skip("/usr/bin/python3 lacks psycopg2 or redis")
	}
	sys := "../../examples/python/system.yaml"
	scenario := func(name, committed, between string) string {
		return scenarioFile(t, name+".yaml", "name: "+name+"\nsteps:\n  - start: relay\n"+
			"  - produce_overlapping: {first: ev-1, second: ev-2}\n    expect: {committed: "+committed+", published_between: "+between+"}\n")
	}
	right, wrongCommitted, wrongBetween := scenario("right", "2", "1"), scenario("wrong-committed", "3", "1"), scenario("wrong-between", "2", "0")
	code, out, errOut := cli(t, "run", "--system", sys, right, wrongCommitted, wrongBetween)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1:\n%s\n%s", code, out, errOut)
	}
	if pass := block(out, "--- PASS: right "); pass == "" {
		t.Errorf("the right values did not pass:\n%s", out)
	}
	for name, want := range map[string]string{"wrong-committed": "committed: want 3, got 2", "wrong-between": "published_between: want 0, got 1"} {
		if fail := block(out, "--- FAIL: "+name+" "); !strings.Contains(fail, want) {
			t.Errorf("%s: want %q in:\n%s", name, want, fail)
		}
	}
}
