package main

import (
	"strings"
	"testing"
)

// metrics.projection_lag reads a team's outbox and inbox where its system
// file maps them (payment_outbox, processed_messages): explore's built-in
// workload waits on it before its re-sends. It read the reference tables,
// which a team's databases lack ("relation outbox does not exist").
func TestProjectionLagReadsATeamsTables(t *testing.T) {
	t.Parallel()
	sc := scenarioFile(t, "lag.yaml", `name: the payments consumer catches up
system: `+mustAbs(t, "../../examples/go-payments/system.yaml")+`
steps:
  - produce: {event: pay-1, amount: 100}
  - produce: {event: pay-2, amount: 50}
  - start: relay
  - expect: {outbox.unpublished: 0, within: 10s}
  - expect: {metrics.projection_lag: 2}
  - start: consumer
  - expect: {metrics.projection_lag: 0, within: 10s}
`)
	code, stdout, stderr := cliEnv(t, []string{"PAYMENTS_BIN=" + paymentsService(t), "BUG="}, "run", "-v", sc)
	if code != exitOK || !strings.Contains(stdout, "ok metrics.projection_lag: 2") {
		t.Errorf("exit %d, want 0 with the lag read from the team's tables\n%s\n%s", code, stdout, stderr)
	}
}
