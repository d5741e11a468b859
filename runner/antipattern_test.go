package runner

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
)

// TestAntipatternsShowTheirDamage runs each anti-pattern scenario once more
// in the correct mode: the damage it asserts must then be gone, so the
// scenario must fail. An anti-pattern scenario that passes either way proves
// nothing.
func TestAntipatternsShowTheirDamage(t *testing.T) {
	t.Parallel()
	fixes := map[string][2]string{ // file → the anti-pattern as written, the correct design
		"antipattern-mark-before-xadd.yaml":                         {"{mode: mark_first, skip_publish: true}", "{skip_mark: true}"},
		"antipattern-ack-before-commit.yaml":                        {"{mode: ack_first, fail: divzero}", "{fail: divzero}"},
		"antipattern-inbox-and-projection-in-two-transactions.yaml": {"{mode: split_tx, fail: divzero}", "{fail: divzero}"},
		"antipattern-dedupe-by-entry-id.yaml":                       {"{dedupe: entry_id}", "{dedupe: event_id}"},
		"antipattern-new-consumer-id.yaml":                          {"{consumer: accounting-v2, projection: accounting,", "{consumer: accounting-v2,"},
		"antipattern-inbox-purged-too-early.yaml":                   {"  - inbox.purge: {consumer: accounting}\n    expect: {purged: 1}\n", ""},
		"antipattern-setnx-then-postgres.yaml":                      {"{dedupe: setnx, fail: divzero}", "{fail: divzero}"},
		"concurrent-relays-flag.yaml":                               {"lease: flag", "lease: skip_locked"},
		"antipattern-cdc-confirm-before-publish.yaml":               {"{mode: cdc_confirm_first, skip_publish: true}", "{mode: cdc, skip_publish: true}"},
		"antipattern-never-claim.yaml":                              {"  - consume:\n    expect: {delivered: 0}\n  - expect", "  - claim:\n    expect: {delivered: 0}\n  - expect"},
	}
	files, _ := filepath.Glob("../scenarios/antipatterns/*.yaml")
	if len(files) != len(fixes) {
		t.Fatalf("%d anti-pattern scenarios, %d fixes: every anti-pattern needs its correct twin here", len(files), len(fixes))
	}
	var scs, undeclared []*scenario.Scenario
	for _, f := range files {
		fix, ok := fixes[filepath.Base(f)]
		if !ok {
			t.Fatalf("no correct mode for %s", f)
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), fix[0]) {
			t.Fatalf("%s no longer contains %q", f, fix[0])
		}
		fixed, errs := scenario.Parse(f, []byte(strings.Replace(string(src), fix[0], fix[1], 1)), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatalf("%s in the correct mode: %v", f, errs)
		}
		scs = append(scs, fixed...)
		// The same anti-pattern without its declaration: the history
		// checker must catch the damage on its own.
		decl := regexp.MustCompile(`(?m)^expect_violations: .*\n`)
		if !decl.Match(src) {
			t.Fatalf("%s declares no expect_violations", f)
		}
		bare, errs := scenario.Parse(f, decl.ReplaceAll(src, nil), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatalf("%s without expect_violations: %v", f, errs)
		}
		for _, sc := range bare {
			sc.Name += " (undeclared)"
		}
		undeclared = append(undeclared, bare...)
	}
	rep, _ := runAll(t, testParams(t), append(scs, undeclared...))
	for i, r := range rep.Results {
		keys := failureKeys(r)
		switch {
		case i < len(scs) && r.Passed():
			t.Errorf("%s passes in the correct mode too: it does not show the damage", r.Scenario.File)
		case i >= len(scs) && !keys["history"]:
			t.Errorf("%s without expect_violations: want the history checker to fail it, got %v", r.Scenario.File, r.Failures)
		}
	}
}

func failureKeys(r *report.Result) map[string]bool {
	keys := map[string]bool{}
	for _, f := range r.Failures {
		keys[f.Key] = true
	}
	return keys
}
