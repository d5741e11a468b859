package explore

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
)

// A written finding carries what its run needs: `runner run FILE` alone
// runs it on the broker and with the settle explore used, and does not
// judge what explore itself could not judge at its faults (double
// published after an error at an XADD: pipelineCaveat). A flaky one says
// so in its header, with the command that measures it again.
func TestAWrittenFindingCarriesItsRun(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	relay := w.Starts[0]
	e := &explorer{p: Params{Out: out, Runner: runner.Params{Brokers: []string{"kafka"}, Settle: 40 * time.Second}}}
	f := &Finding{Broken: []string{"lost"}, Why: "lost: …", Minimal: Variant{Faults: []Fault{{Step: relay, On: on("broker.reply(XADD)"), Nth: 1, Do: "error"}}}}
	if err := e.write(w, f); err != nil {
		t.Fatal(err)
	}
	scs, errs := scenario.LoadFiles([]string{f.File}, scenariotest.Kinds())
	body, _ := os.ReadFile(f.File)
	if len(errs) > 0 {
		t.Fatalf("%v\n%s", errs, body)
	}
	sc := scs[0]
	if sc.Pinned != "kafka" || sc.Settle != 40*time.Second || strings.Join(sc.NotJudged, ",") != "double_published" || len(sc.Violations("kafka")) != 0 {
		t.Errorf("pinned %q, settle %s, not judged %v, expect_violations %v, want kafka, 40s, [double_published], none\n%s", sc.Pinned, sc.Settle, sc.NotJudged, sc.Violations("kafka"), body)
	}
	if strings.Contains(string(body), "FLAKY") {
		t.Errorf("an unconfirmed finding says FLAKY:\n%s", body)
	}
	// The default settle is not written; a fault elsewhere judges all.
	e.p.Runner.Settle = runner.DefaultSettle
	f.Minimal.Faults[0].Do, f.Reproduced, f.Tries = "kill", 1, 3
	if err := e.write(w, f); err != nil {
		t.Fatal(err)
	}
	body, _ = os.ReadFile(f.File)
	for _, unwanted := range []string{"settle:", "not_judged:"} {
		if strings.Contains(string(body), unwanted) {
			t.Errorf("%s written:\n%s", unwanted, body)
		}
	}
	for _, want := range []string{"# FLAKY: reproduced 1/3 when written", "# Re-measure: for i in $(seq 10); do runner run " + f.File, "broker: kafka\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the flaky finding's file lacks %q:\n%s", want, body)
		}
	}
}

// Shrinking's progress line counts what the round runs with.
func TestCountElements(t *testing.T) {
	w := &Workload{Events: []int{0, 1, 2}}
	c := []element{{event: 0}, {event: 2}, {fault: &Fault{}}}
	if ev, fs := countElements(c, nil, w); ev != 2 || fs != 1 {
		t.Errorf("%d events, %d faults, want 2 and 1", ev, fs)
	}
	if ev, fs := countElements(c[2:], map[int]bool{1: true}, w); ev != 2 || fs != 1 {
		t.Errorf("check-only: %d events, %d faults, want 2 (all it kept) and 1", ev, fs)
	}
}
