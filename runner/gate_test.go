package runner

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/system"
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

// A service a step starts whose ready: {on: …} names a boundary the
// broker's proxy does not count (XREADGROUP on NATS, the system file
// listing no brokers) would never be ready there: the gate skips the
// scenario, at the ready's on:, before anything starts.
func TestReadyOnAnotherBrokersOperationSkips(t *testing.T) {
	sys := system.System{File: "system.yaml", Services: map[string]*system.Service{
		"consumer": {Name: "consumer", Run: []string{"x"}},
		"relay":    {Name: "relay", Run: []string{"y"}},
	}}
	f, probs := fault.Watch("broker.request(XREADGROUP)", broker.Dialects(scenariotest.Kinds()))
	if len(probs) > 0 {
		t.Fatal(probs)
	}
	sys.Services["consumer"].ReadyOn, sys.Services["consumer"].ReadyOnPos = f, diag.Pos{File: "system.yaml", Line: 3, Col: 9}
	parse := func(start string) *scenario.Scenario {
		scs, errs := scenario.Parse("gate.yaml", []byte("name: gate\nsteps:\n  - start: "+start+"\n"), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		scs[0].System = &sys
		return scs[0]
	}
	at, why := readySkip(parse("consumer"), "nats")
	if at.Line != 3 || !strings.Contains(why, `service consumer's ready: broker.request(XREADGROUP) does not apply on nats: unknown operation "XREADGROUP"`) {
		t.Errorf("skip %q at %s, want the consumer's ready said at its on:", why, at)
	}
	for _, c := range []struct{ start, broker string }{{"consumer", "redis"}, {"relay", "nats"}} {
		if at, why := readySkip(parse(c.start), c.broker); why != "" {
			t.Errorf("start %s on %s: skip %q at %s", c.start, c.broker, why, at)
		}
	}
	// validate --broker nats says it before any run: at the ready's on:.
	errs := CheckTriggers([]*scenario.Scenario{parse("consumer")}, []string{"nats"}, true)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), `system.yaml:3:9: service consumer's ready: broker.request(XREADGROUP) does not apply on nats: unknown operation "XREADGROUP"`) ||
		!strings.HasSuffix(errs[0].Error(), "XREADGROUP is an operation of redis (a run on nats skips the scenario)") {
		t.Errorf("validate --broker nats: %v", errs)
	}
	if errs := CheckTriggers([]*scenario.Scenario{parse("consumer")}, []string{"redis"}, true); len(errs) > 0 {
		t.Errorf("validate --broker redis: %v", errs)
	}
}
