package runner

import (
	"testing"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/scenario"
)

// TestProjectionLagCountsAConsumerWithNoInboxRow: a consumer id the
// scenario names but that has applied nothing yet (stuck on its first
// event) is the most behind; beside a caught-up one it must not read 0.
func TestProjectionLagCountsAConsumerWithNoInboxRow(t *testing.T) {
	t.Parallel()
	sc := scenariotest.ParseOne(t, `name: one consumer caught up, one never consumed
steps:
  - produce
  - produce
  - relay
  - consume: {consumer: accounting}
    expect: {applied: 2}
  - expect:
      inbox.rows: {accounting: 2}
      metrics.projection_lag: 2
      metrics.projection_watermark_age: "> 0"
  - consume: {consumer: audit}
    expect: {applied: 2}
  - expect: {metrics.projection_lag: 0, metrics.projection_watermark_age: 0}
`)
	_, byName := runAll(t, testParams(t), []*scenario.Scenario{sc})
	if r := byName[sc.Name]; !r.Passed() {
		t.Fatalf("want the scenario to pass, got %v (skipped %q)", r.Failures, r.Skipped)
	}
}
