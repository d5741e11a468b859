package steps

import "github.com/outboxdrill/runner/broker"

// redisVerbs name what a step does where the run names no broker (a
// step's own tests): the reference pipeline's first broker.
var redisVerbs = broker.Verbs{Publish: "XADD", Read: "XREADGROUP", Ack: "XACK", Claim: "XCLAIM"}

// verbs are the run's broker's own names of what the steps do, for the
// step traces.
func verbs(env *Env) broker.Verbs {
	if v, ok := env.Broker.(broker.Verber); ok { // a scenario's own mode (a Kafka share group)
		return v.Verbs()
	}
	if k, ok := broker.Lookup(env.BrokerName); ok {
		return k.Verbs
	}
	return redisVerbs
}

// verbsOr is r's verbs, the Redis ones for a result made without a run.
func (r Result) verbsOr() broker.Verbs {
	if r.Verbs.Publish == "" {
		return redisVerbs
	}
	return r.Verbs
}
