package scenario

import (
	"slices"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
)

// Needs lists what the scenario asks of broker b, from its steps'
// parameters and its keys, in a stable order. Its state checks are not
// needs: one the broker cannot read is n/a there.
func (sc *Scenario) Needs(b string) []broker.Capability {
	var out []broker.Capability
	for _, c := range sc.Steps {
		out = append(out, c.Needs()...)
	}
	// Loss is judged on what the broker still holds: without its entry log
	// a declared loss could not be shown, and must not fail for that.
	if slices.Contains(sc.Violations(b), history.Lost) {
		out = append(out, broker.EntryLog)
	}
	if sc.BrokerDLQ > 0 {
		out = append(out, broker.NativeDeadLetter)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Consumers are the consumer ids the scenario's consuming steps name, sorted.
func (sc *Scenario) Consumers() []string {
	ids, _ := consumerIDs(sc)
	return ids
}

// consumerIDs are the consumer ids the scenario's consume and claim steps
// name, sorted (a consumer that received nothing is judged too), and the
// read models they write with their writers.
func consumerIDs(sc *Scenario) ([]string, map[string][]string) {
	var ids []string
	models := map[string][]string{}
	for _, c := range sc.Steps {
		cons, ok := c.Consumes()
		if !ok {
			continue
		}
		id, model := cons.Consumer, cons.Model
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if !slices.Contains(models[model], id) {
			models[model] = append(models[model], id)
		}
	}
	slices.Sort(ids)
	return ids, models
}

// ReadModels are the read models the scenario's consuming steps write, each
// with the consumer ids that write it.
func (sc *Scenario) ReadModels() map[string][]string {
	_, models := consumerIDs(sc)
	return models
}
