package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
)

// A window holds on a broker only when a scenario executed its fault there
// and passed: a pass that never reached the fault, a skip before it, or an
// anti-pattern's damage is "not shown", whatever the scenario's tags say.
func TestGuaranteesHoldOnlyWithEvidence(t *testing.T) {
	sc := scenariotest.ParseOne(t, "name: rollback\ntags: [rollback]\nsteps:\n  - produce\n  - relay\n  - consume(fail=divzero)\n  - claim\n")
	anti := scenariotest.ParseOne(t, "name: anti\ntags: [antipattern, rollback]\nsteps:\n  - produce\n  - relay\n  - consume(fail=divzero)\n")
	records := func(n int) []report.StepRecord {
		var rs []report.StepRecord
		for _, c := range sc.Steps[:n] {
			rs = append(rs, report.StepRecord{Call: c, Result: steps.Result{Outcome: map[string]int64{}}})
		}
		return rs
	}
	rep := &report.Report{Brokers: []string{"redis", "nats", "rabbitmq", "kafka"}, Results: []*report.Result{
		{Scenario: sc, Broker: "redis", Steps: records(4)},                                           // executed the fault, passed
		{Scenario: sc, Broker: "nats", Steps: records(2), Skipped: "t.yaml:6:5: needs x, https://x"}, // skipped before it
		{Scenario: sc, Broker: "rabbitmq", Steps: records(2)},                                        // passed without reaching it
		{Scenario: anti, Broker: "kafka", Steps: []report.StepRecord{{Call: anti.Steps[2]}}},         // damage only
	}}
	var doc bytes.Buffer
	if err := report.WriteGuarantees(&doc, rep); err != nil {
		t.Fatal(err)
	}
	const title = "### Consumer transaction and ack"
	section := doc.String()[strings.Index(doc.String(), title):]
	section = section[:strings.Index(section[len(title):], "###")+len(title)]
	for b, want := range map[string]string{
		"redis":    "- **redis**: **holds** — shown by 1 scenario(s) that executed a fault in a consume or claim",
		"nats":     "- **nats**: **not shown**: no scenario executed a fault in a consume or claim (fail, skip_ack) or a consumer database crash and passed here; not shown by 1: “rollback” (skipped: needs x, https://x)",
		"rabbitmq": "- **rabbitmq**: **not shown**: no scenario executed a fault in a consume or claim (fail, skip_ack) or a consumer database crash and passed here; not shown by 1: “rollback” (passed without executing",
		"kafka":    "- **kafka**: **not shown**: no scenario executed a fault in a consume or claim (fail, skip_ack) or a consumer database crash and passed here; anti-pattern damage shown by 1: “anti”",
	} {
		if !strings.Contains(section, want) {
			t.Errorf("%s: want a line starting %q in:\n%s", b, want, section)
		}
	}
	if report.Shows("Consumer transaction and ack", rep.Results[2]) || !report.Shows("Consumer transaction and ack", rep.Results[0]) {
		t.Error("Shows disagrees with the document")
	}
}

// A broker-made dead letter is no consume outcome: its replay from the
// dead letters is the evidence that the poison-message window was shown.
func TestABrokerMadeDeadLetterShowsThePoisonWindow(t *testing.T) {
	sc := scenariotest.ParseOne(t, "name: native\ntags: [dlq]\nbroker_dlq: {max_deliveries: 2}\nsteps:\n  - produce\n  - relay\n  - consume(fail=divzero)\n  - replay_dlq\n")
	var rs []report.StepRecord
	for _, c := range sc.Steps {
		out := map[string]int64{}
		if c.Def.Name == "replay_dlq" {
			out["replayed"] = 1
		}
		rs = append(rs, report.StepRecord{Call: c, Result: steps.Result{Outcome: out}})
	}
	if !report.Shows("Poison messages", &report.Result{Scenario: sc, Broker: "nats", Steps: rs}) {
		t.Error("a replayed broker-made dead letter does not show the poison-message window")
	}
}
