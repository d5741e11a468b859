package scenario

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
)

// NATSOptions tune a scenario's JetStream stream (the nats: key).
type NATSOptions struct {
	// MsgID: relay publishes carry Nats-Msg-Id = event id, so the server
	// drops a second publish of the event inside DedupeWindow.
	MsgID bool
	// DedupeWindow is the stream's duplicate window (0: the broker's default).
	DedupeWindow time.Duration
	// AckWait is how long a delivered, unacknowledged message waits before
	// it is delivered again (0: the broker's default).
	AckWait time.Duration
}

// defaultNATS is a scenario's JetStream stream without a nats: key.
var defaultNATS = NATSOptions{MsgID: true}

func init() {
	defineTopKey(&topKey{Name: "nats",
		Doc: "this scenario's JetStream stream: `msg_id` (relay publishes carry Nats-Msg-Id = event id; default true), `dedupe_window` (default 2m), `ack_wait` (redelivery after, default 1s)",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.NATS = parseNATS(file, kv.Value, errs)
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

// natsKeys are the keys of the top-level nats: map.
var natsKeys = []string{"msg_id", "dedupe_window", "ack_wait"}

// parseNATS reads nats: {msg_id: false, dedupe_window: 1s, ack_wait: 500ms}.
func parseNATS(file string, n *yaml.Node, errs *diag.Errors) NATSOptions {
	opt := defaultNATS
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "nats: want a map with %s", strings.Join(natsKeys, ", ")))
		return opt
	}
	for _, kv := range diag.Pairs(file, n, errs) {
		pos := diag.NodePos(file, kv.Value)
		var err error
		switch kv.Key {
		case "msg_id":
			err = kv.Value.Decode(&opt.MsgID)
			if kv.Value.ShortTag() != "!!bool" {
				err = fmt.Errorf("want true or false, got %s", diag.Describe(kv.Value))
			}
		case "dedupe_window":
			opt.DedupeWindow, err = steps.Duration(kv.Value)
		case "ack_wait":
			opt.AckWait, err = steps.Duration(kv.Value)
		default:
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "nats: unknown key %q%s; known: %s", kv.Key, diag.Suggest(kv.Key, natsKeys), strings.Join(natsKeys, ", ")))
			continue
		}
		if err != nil {
			*errs = append(*errs, diag.Errorf(pos, "nats: %s: %v", kv.Key, err))
		}
	}
	return opt
}
