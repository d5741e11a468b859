package scenario

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
)

// KafkaOptions tune the scenario's Kafka topic and groups (its kafka: key).
type KafkaOptions struct {
	// Partitions of the topic (0: one). Records of one event id stay in
	// one partition; order holds only within a partition.
	Partitions int
	// Share consumes with share groups (KIP-932): records acknowledged one
	// by one, redeliveries counted by the broker. Default: classic groups.
	Share bool
}

func init() {
	defineTopKey(&topKey{Name: "kafka",
		Doc: "this scenario's Kafka topic: `partitions` (default 1), `share` (consume with share groups, KIP-932: per-record acknowledgement and a delivery count; default false, classic consumer groups with committed offsets)",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.Kafka = parseKafka(file, kv.Value, errs)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "object", "additionalProperties": false, "description": "this scenario's Kafka topic",
				"properties": map[string]any{
					"partitions": map[string]any{"type": "integer", "minimum": 1, "description": "partitions of the topic (default 1)"},
					"share":      map[string]any{"type": "boolean", "description": "consume with share groups (KIP-932) instead of classic consumer groups"},
				}}
		}})
}

// kafkaKeys are the keys of the top-level kafka: map.
var kafkaKeys = []string{"partitions", "share"}

// parseKafka reads kafka: {partitions: 3, share: true}.
func parseKafka(file string, n *yaml.Node, errs *diag.Errors) KafkaOptions {
	var opt KafkaOptions
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "kafka: want a map with %s", strings.Join(kafkaKeys, ", ")))
		return opt
	}
	for _, kv := range diag.Pairs(file, n, errs) {
		pos := diag.NodePos(file, kv.Value)
		var err error
		switch kv.Key {
		case "partitions":
			if kv.Value.ShortTag() != "!!int" || kv.Value.Decode(&opt.Partitions) != nil || opt.Partitions < 1 {
				err = fmt.Errorf("want a whole number of at least 1, got %s", diag.Describe(kv.Value))
			}
		case "share":
			if kv.Value.ShortTag() != "!!bool" || kv.Value.Decode(&opt.Share) != nil {
				err = fmt.Errorf("want true or false, got %s", diag.Describe(kv.Value))
			}
		default:
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "kafka: unknown key %q%s; known: %s", kv.Key, diag.Suggest(kv.Key, kafkaKeys), strings.Join(kafkaKeys, ", ")))
			continue
		}
		if err != nil {
			*errs = append(*errs, diag.Errorf(pos, "kafka: %s: %v", kv.Key, err))
		}
	}
	return opt
}
