package runner

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
)

// A state check the broker cannot read is n/a there: reported with the
// broker's documented reason in every format, not judged, and the rest of
// the scenario runs and can fail. A scenario whose every check is n/a is
// skipped, never passed by omission.
func TestChecksTheBrokerCannotReadAreNA(t *testing.T) {
	t.Parallel()
	// An aggregate gives the order verdicts something to judge: the only
	// gap in the verdict is the n/a check.
	const head = "  - produce: {aggregate: acct-1}\n  - relay\n  - consume:\n    expect: {applied: 1}\n"
	scs := []*scenario.Scenario{
		scenariotest.ParseOne(t, "name: na pass\nsteps:\n"+head+"  - expect: {inbox.rows: 1, stream.pending: 0}\n"),
		scenariotest.ParseOne(t, "name: na wrong\nsteps:\n"+head+"  - expect: {inbox.rows: 2, stream.pending: 0}\n"),
		scenariotest.ParseOne(t, "name: all na\nsteps:\n  - produce\n  - relay\n  - expect: {stream.pending: 0}\n"),
	}
	p := testParams(t)
	p.URLs[broker.RabbitMQ] = testservers.URL(t, broker.RabbitMQ)
	p.Brokers = []string{broker.RabbitMQ}
	rep, byName := runAll(t, p, scs)

	pass := byName["na pass"]
	if !pass.Passed() || pass.Skipped != "" || len(pass.NA) != 1 {
		t.Fatalf("na pass: want a pass with one n/a, got passed=%v skipped=%q na=%v failures=%v", pass.Passed(), pass.Skipped, pass.NA, pass.Failures)
	}
	na := pass.NA[0]
	if na.Key != "stream.pending" || na.Pos.Line != 7 || !strings.HasPrefix(na.Reason, "n/a on rabbitmq (no pending_count): ") || !strings.Contains(na.Reason, "https://") {
		t.Errorf("n/a = %s; want stream.pending at line 7, with RabbitMQ's cited reason", na)
	}
	wrong := byName["na wrong"]
	if wrong.Passed() || !strings.Contains(wrong.Failures[0].Msg, "want 2, got 1") || wrong.Failures[0].Key != "inbox.rows" {
		t.Errorf("na wrong: want inbox.rows to fail beside the n/a check, got %v", wrong.Failures)
	}
	if all := byName["all na"]; !all.Passed() || !strings.Contains(all.Skipped, "every check is n/a on rabbitmq") {
		t.Errorf("all na: want a skip naming every check n/a, got passed=%v skipped=%q", all.Passed(), all.Skipped)
	}

	if sum := rep.Summary(); !strings.Contains(sum, "1 passed, 1 failed, 1 skipped (n/a checks: 2)") {
		t.Errorf("summary %q does not count the n/a check of the scenarios that ran", sum)
	}
	var js, ju, md bytes.Buffer
	if err := report.WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var doc report.JSONReport
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range doc.Scenarios {
		if s.Name == "na pass" && (len(s.NA) != 1 || s.NA[0].Pos != "t.yaml:7:29" || s.NA[0].Key != "stream.pending") {
			t.Errorf("JSON n/a of na pass = %+v", s.NA)
		}
	}
	if err := report.WriteJUnit(&ju, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ju.String(), `<property name="n/a" value="t.yaml:7:29: stream.pending: n/a on rabbitmq (no pending_count): `) {
		t.Errorf("JUnit lacks the n/a property:\n%s", ju.String())
	}
	rep.Brokers = []string{broker.RabbitMQ, broker.Redis} // the matrix table
	if err := report.WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "✅ pass (1 n/a)") {
		t.Errorf("Markdown lacks the n/a count:\n%s", md.String())
	}
	if out := string(report.FormatResult(pass, false)); !strings.Contains(out, "    n/a t.yaml:7:29: stream.pending: n/a on rabbitmq") {
		t.Errorf("console block lacks the n/a line:\n%s", out)
	}
}
