package scenario

import (
	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
)

// The broker_dlq: key has the broker itself dead-letter an entry delivered
// too often, as production setups do beside (or instead of) the
// application's own dead-letter stream (a consume step's max_deliveries).
func brokerDLQKey() *topKey {
	return &topKey{Name: "broker_dlq",
		Doc: "the broker's own dead-lettering: `{max_deliveries: N}` sets an entry aside on its N-th delivery without an ack " +
			"(RabbitMQ: quorum-queue `x-delivery-limit` + a dead-letter exchange; JetStream: `MaxDeliver` + the MAX_DELIVERIES advisory). " +
			"Its dead letters are listed with the application's (`dlq.entries`), reason `broker: …`. " +
			"JetStream sets an entry aside when it would deliver it once more: `dlq.entries` counts it after the next read (a consume or claim), not before. Needs `native_dlq`",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.BrokerDLQ = parseBrokerDLQ(file, kv.Value, errs)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "object", "additionalProperties": false, "required": []string{"max_deliveries"},
				"description": "the broker's own dead-lettering",
				"properties": map[string]any{
					"max_deliveries": map[string]any{"type": "integer", "minimum": 1, "description": "set an entry aside on its N-th delivery"},
				}}
		}}
}

// parseBrokerDLQ reads broker_dlq: {max_deliveries: N}.
func parseBrokerDLQ(file string, n *yaml.Node, errs *diag.Errors) int {
	const want = "broker_dlq: want a map {max_deliveries: N}"
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s", want))
		return 0
	}
	max, seen, unknown := 0, false, false
	for _, kv := range diag.Pairs(file, n, errs) {
		if kv.Key != "max_deliveries" {
			unknown = true
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "broker_dlq: unknown key %q%s; known: max_deliveries", kv.Key, diag.Suggest(kv.Key, []string{"max_deliveries"})))
			continue
		}
		seen = true
		if err := kv.Value.Decode(&max); err != nil || kv.Value.ShortTag() != "!!int" || max < 1 {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "broker_dlq: max_deliveries: want an integer >= 1, got %s", diag.Describe(kv.Value)))
			max = 0
		}
	}
	if !seen && !unknown {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s", want))
	}
	return max
}
