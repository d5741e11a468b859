package runner

import (
	"fmt"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// gate is the skip reason of a job that must not start on its broker, or
// "": every skip that the scenario, its broker options and the world
// (its servers open) decide, before anything is made for it, in the order
// a run would meet them:
//
//   - a system file that does not support the broker (its services would
//     get a URL scheme they cannot parse), a scenario pinned to another
//     broker, a consumer id the broker cannot name;
//   - what the steps need that the broker lacks, as its kind says for the
//     scenario's options (Kind.Capabilities);
//   - a CDC relay on a producer server whose wal_level is not logical;
//   - a step whose process fault hits a server that is not the runner's
//     own, or whose broker fault the broker's proxy does not take (or it
//     has none);
//   - a service a step starts whose ready: {on: …} names a broker
//     boundary the broker's proxy does not take: it would never be ready;
//   - every check n/a on the broker: nothing would be judged.
//
// What only running can tell skips later: a fault that met a crossing it
// could not classify exactly (judge.Finish), and an interrupt.
func (r *scenarioRun) gate() string {
	sc, b := r.j.sc, r.j.broker
	if sc.System != nil {
		// Never run: the services would get a URL scheme they cannot parse.
		if why := sc.System.Unsupported(b); why != "" {
			return fmt.Sprintf("%s: %s", sc.SystemPos, why)
		}
	}
	if why := sc.PinnedSkip(b); why != "" {
		return why
	}
	// Never sent to a broker that cannot name it (on RabbitMQ a refused
	// queue name closes the run's shared connection).
	if at, why := consumerIDSkip(sc, b); why != "" {
		return fmt.Sprintf("%s: %s", at, why)
	}
	r.caps = capabilities(sc, b)
	// A scenario is never passed on a broker that cannot do what it asks.
	if why := lacking(sc, b, r.caps); why != "" {
		return fmt.Sprintf("%s: %s", sc.Pos, why)
	}
	if at, why := slotSkip(r.w, sc); why != "" {
		return fmt.Sprintf("%s: %s", at, why)
	}
	if at, why := stepSkip(r.w.Control(b, sc), sc, b); why != "" {
		return fmt.Sprintf("%s: %s", at, why)
	}
	if at, why := readySkip(sc, b); why != "" {
		return fmt.Sprintf("%s: %s", at, why)
	}
	if r.na = steps.AllNA(sc.Steps, b, r.caps); len(r.na) > 0 {
		// Judged nothing: never a pass by omission.
		return fmt.Sprintf("%s: every check is n/a on %s: %s", sc.Pos, b, r.na[0].Reason)
	}
	return ""
}

// capabilities are what broker b can do for scenario sc, as its kind
// answers for sc's options before any of its objects exist.
func capabilities(sc *scenario.Scenario, b string) broker.Capabilities {
	k, ok := broker.Lookup(b)
	if !ok {
		return nil
	}
	return k.Capabilities(sc.Broker(b))
}

// consumerIDSkip is why broker b cannot name one of sc's consumer ids, at
// the first step that names it ("" when it can).
func consumerIDSkip(sc *scenario.Scenario, b string) (diag.Pos, string) {
	for _, c := range sc.Steps {
		if cons, ok := c.Consumes(); ok {
			if why := broker.ConsumerIDSkip(b, []string{cons.Consumer}); why != "" {
				return c.Pos, why
			}
		}
	}
	return sc.Pos, broker.ConsumerIDSkip(b, sc.Consumers())
}

// stepSkip is the first step of sc that cannot run on broker b here, and
// why: a process fault of a server that is not the runner's own (ctl
// says whose it is), or a broker fault b's proxy does not take.
func stepSkip(ctl steps.ProcessControl, sc *scenario.Scenario, b string) (diag.Pos, string) {
	for _, c := range sc.Steps {
		if why := steps.ProcessSkip(ctl, c); why != "" {
			return c.Pos, why
		}
		if why := faultSkip(c, b); why != "" {
			return c.Pos, why
		}
	}
	return diag.Pos{}, ""
}

// faultSkip is why a broker fault that step c arms (start's fault, also
// and then, the fault step's) cannot be armed on broker b, "" when each
// can: b has no protocol proxy, or its proxy does not take the fault as
// written (XADD on Kafka: the reason its dialect compiled at load).
func faultSkip(c *steps.Call, b string) string {
	k, _ := broker.Lookup(b)
	for _, st := range steps.Triggers(c) {
		if st.Link.Database() {
			continue
		}
		if k == nil || k.Proxy == nil {
			return fmt.Sprintf("%s needs a %s protocol proxy; the runner has none for it", st.On(), b)
		}
		if cp, ok := st.For(b); ok && cp.Skip != nil {
			return fmt.Sprintf("%s does not apply on %s: %v", st.On(), b, cp.Skip)
		}
	}
	return ""
}

// readySkip is sc.ReadySkip: why a service a start step of sc starts
// could never be known ready on broker b.
func readySkip(sc *scenario.Scenario, b string) (diag.Pos, string) { return sc.ReadySkip(b) }
