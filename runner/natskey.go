package runner

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	jsbroker "outboxdrill/broker/jetstream"
	"outboxdrill/steps"
)

// The nats: top-level key tunes a scenario's JetStream stream; it lives
// beside the NATS broker kind, not in the loader.
func init() {
	defineTopKey(&topKey{Name: "nats",
		Doc: "this scenario's JetStream stream: `msg_id` (relay publishes carry Nats-Msg-Id = event id; default true), `dedupe_window` (default 2m), `ack_wait` (redelivery after, default 1s)",
		parse: func(file string, kv steps.Arg, h *header, errs *steps.Errors) {
			h.BrokerOptions["nats"] = parseNATS(file, kv.Value, errs)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "object", "additionalProperties": false, "description": "this scenario's JetStream stream",
				"properties": map[string]any{
					"msg_id":        map[string]any{"type": "boolean", "description": "relay publishes carry Nats-Msg-Id = event id (default true)"},
					"dedupe_window": steps.DurationSchema(),
					"ack_wait":      steps.DurationSchema(),
				}}
		}})
}

// natsOptions are the scenario's JetStream options (nats:), or the defaults.
func natsOptions(sc *Scenario) jsbroker.Options {
	if o, ok := sc.BrokerOptions["nats"].(jsbroker.Options); ok {
		return o
	}
	return jsbroker.Options{Dedupe: true}
}

// natsKeys are the keys of the top-level nats: map.
var natsKeys = []string{"msg_id", "dedupe_window", "ack_wait"}

// parseNATS reads nats: {msg_id: false, dedupe_window: 1s, ack_wait: 500ms}.
func parseNATS(file string, n *yaml.Node, errs *steps.Errors) jsbroker.Options {
	opt := jsbroker.Options{Dedupe: true}
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, steps.Errorf(steps.NodePos(file, n), "nats: want a map with %s", strings.Join(natsKeys, ", ")))
		return opt
	}
	for _, kv := range pairs(file, n, errs) {
		pos := steps.NodePos(file, kv.Value)
		var err error
		switch kv.Key {
		case "msg_id":
			err = kv.Value.Decode(&opt.Dedupe)
			if kv.Value.ShortTag() != "!!bool" {
				err = fmt.Errorf("want true or false, got %s", steps.Describe(kv.Value))
			}
		case "dedupe_window":
			opt.DedupeWindow, err = steps.Duration(kv.Value)
		case "ack_wait":
			opt.AckWait, err = steps.Duration(kv.Value)
		default:
			*errs = append(*errs, steps.Errorf(kv.KeyPos, "nats: unknown key %q%s; known: %s", kv.Key, steps.Suggest(kv.Key, natsKeys), strings.Join(natsKeys, ", ")))
			continue
		}
		if err != nil {
			*errs = append(*errs, steps.Errorf(pos, "nats: %s: %v", kv.Key, err))
		}
	}
	return opt
}
