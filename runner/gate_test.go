package runner

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/scenario"
)

// A broker fault that names another broker's own operation (XADD on
// NATS) skips the scenario with the reason, before any process starts:
// the gate decides it, before anything is acquired for the scenario.
func TestBrokerFaultOfAnotherBrokerSkips(t *testing.T) {
	scs, errs := scenario.Parse("../examples/node/gate.yaml", []byte(`name: gate
system: system.yaml
steps:
  - produce
  - start: {service: relay, fault: {on: "broker.reply(XADD)", do: kill}}
`), scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	at, why := stepSkip(nil, scs[0], "nats")
	if at.Line != 5 || !strings.Contains(why, `broker.reply(XADD) does not apply on nats: unknown operation "XADD"`) {
		t.Fatalf("skip %q at %s, want one saying XADD is not a NATS operation, at the start step", why, at)
	}
	if at, why := stepSkip(nil, scs[0], "redis"); why != "" {
		t.Errorf("on redis: skip %q at %s", why, at)
	}
}
