package system

import (
	"encoding/json"
	"maps"
	"strings"

	"github.com/outboxdrill/runner/broker"
)

// JSONSchema is the JSON Schema (draft 2020-12) of a system file, for editors
// (yaml-language-server) and tests; `runner schema --system` prints it.
func JSONSchema() []byte {
	str := map[string]any{"type": "string", "minLength": 1}
	ident := map[string]any{"type": "string", "pattern": `^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$`}
	obj := func(props map[string]any, required ...string) map[string]any {
		o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			o["required"] = required
		}
		return o
	}
	serviceProps := func() map[string]any {
		return map[string]any{
			"run":   map[string]any{"type": "array", "minItems": 1, "items": str, "description": "argv, run in the system file's directory"},
			"env":   map[string]any{"type": "object", "propertyNames": map[string]any{"pattern": `^[A-Za-z_][A-Za-z0-9_]*$`}, "additionalProperties": map[string]any{"type": []string{"string", "number", "boolean"}}, "description": "added to the runner's environment; ${…} expanded"},
			"ready": ready(str),
		}
	}
	props := serviceProps()
	props["variants"] = map[string]any{"type": "object", "minProperties": 1, "propertyNames": map[string]any{"enum": broker.Names()},
		"additionalProperties": obj(serviceProps()),
		"description":          "per broker, what differs on it: its run replaces the service's, its env goes over the service's, its ready replaces the service's"}
	props["replicas"] = map[string]any{"type": "integer", "minimum": 1, "maximum": MaxReplicas,
		"description": "how many processes of the service run side by side (default 1): NAME-1 … NAME-N, each with its own proxies and output label; start/stop/kill NAME acts on all of them, NAME-2 on one; ${replica} is each one's number"}
	service := obj(props)
	service["anyOf"] = []any{map[string]any{"required": []string{"run"}}, map[string]any{"required": []string{"variants"}}}
	path := map[string]any{"type": "string", "pattern": `^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$`}
	event := obj(map[string]any{
		"payload":   map[string]any{"type": "object", "description": "the event's JSON; a string that is exactly ${amount} or ${version} is a number, other ${" + strings.Join(PayloadVars, "}, ${") + "} are text"},
		"amount":    withDescription(path, "dotted path to the amount in the payload (default: where the payload has ${amount}, else amount)"),
		"currency":  withDescription(path, "dotted path to the currency in the payload (default: where the payload has ${currency}, else currency)"),
		"aggregate": withDescription(path, "dotted path to the aggregate key in the payload (default: where the payload has ${aggregate}; without payload, a field of the runner's own: aggregate); with version, which it needs, per-aggregate order is judged (out_of_order, gap)"),
		"version":   withDescription(path, "dotted path to the event's whole-number version within its aggregate (default: where the payload has ${version}; without payload, a field of the runner's own: version); needs aggregate"),
	})
	doc := obj(map[string]any{
		"services": map[string]any{"type": "object", "minProperties": 1, "additionalProperties": service,
			"propertyNames": map[string]any{"pattern": `^[A-Za-z_][A-Za-z0-9_-]*$`}},
		"schema":  obj(map[string]any{"producer": str, "consumer": str}),
		"produce": map[string]any{"type": "string", "minLength": 1, "description": "one producer transaction; ${" + joinParams() + "} are bound parameters"},
		"outbox":  obj(map[string]any{"table": ident, "event_id": ident, "payload": ident, "unpublished": str}, "table", "event_id", "payload", "unpublished"),
		"stream": withDescription(obj(map[string]any{"event_id": str, "payload": str}, "event_id", "payload"),
			"the fields of a Redis stream entry carrying the event id and the payload; required where the services may talk to Redis; elsewhere the message header of that name, where a message has one"),
		"inbox": obj(map[string]any{"table": ident, "consumer": ident, "event_id": ident, "payload": ident,
			"applied_order": withDescription(ident, "a column whose order is the consumer's apply order (a serial, bigserial or identity, or a clock_timestamp() default): out_of_order is judged on it")},
			"table", "consumer", "event_id", "payload"),
		"projection":  map[string]any{"type": "string", "minLength": 1, "description": "a query returning consumer id, currency, amount, events"},
		"dead_letter": map[string]any{"type": "string", "minLength": 1, "description": "the destination (stream, topic, subject, exchange; ${…} allowed) the consumer moves an event it gives up on to: one it published there with its payload is dead-lettered, not lost or stuck"},
		"brokers": map[string]any{"type": "array", "minItems": 1, "uniqueItems": true, "items": map[string]any{"enum": broker.Names()},
			"description": "the brokers the services support (default: all); a run on another skips the scenario"},
		"event": event,
	}, required...)
	// stream: names a Redis entry's fields: required where the services may
	// talk to a broker whose entries carry fields (no brokers: list, or one
	// with such a broker: Kind.EntryFields), optional elsewhere.
	doc["allOf"] = []any{
		map[string]any{"if": map[string]any{"not": map[string]any{"required": []string{"brokers"}}}, "then": map[string]any{"required": []string{"stream"}}},
		map[string]any{"if": map[string]any{"required": []string{"brokers"}, "properties": map[string]any{"brokers": map[string]any{"contains": fielded()}}},
			"then": map[string]any{"required": []string{"stream"}}},
	}
	doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	doc["title"] = "outbox drill runner: a team's system file"
	b, _ := json.MarshalIndent(doc, "", "  ")
	return append(b, '\n')
}

// ready is the schema of a service's ready: a log line, a crossing of its
// proxies (a fault's on:), or both; timeout needs one of them.
func ready(str map[string]any) map[string]any {
	return map[string]any{"type": "object", "additionalProperties": false,
		"properties": map[string]any{
			"log": withDescription(str, "a line of the service's stdout or stderr containing this text means ready"),
			"on": map[string]any{"type": "string", "pattern": `^[a-z_]+\.[a-z_]+\([^()]*\)$`,
				"description": "a boundary as a fault's on: writes it, e.g. broker.request(XREADGROUP): ready once the service's proxies saw its first crossing; with log, once both happened"},
			"timeout": map[string]any{"type": "string", "pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`, "description": "how long to wait for the log line and the crossing (default 30s)"}},
		"anyOf": []any{map[string]any{"required": []string{"log"}}, map[string]any{"required": []string{"on"}}}}
}

// fielded is the schema of a broker whose entries carry fields (Redis):
// its name, or one of theirs when there are several.
func fielded() map[string]any {
	var names []string
	for _, k := range broker.Kinds() {
		if k.EntryFields {
			names = append(names, k.Name)
		}
	}
	if len(names) == 1 {
		return map[string]any{"const": names[0]}
	}
	return map[string]any{"enum": names}
}

func joinParams() string {
	s := ""
	for i, p := range ProduceParams {
		if i > 0 {
			s += "}, ${"
		}
		s += p
	}
	return s
}

// withDescription is a copy of schema with a description.
func withDescription(schema map[string]any, d string) map[string]any {
	out := maps.Clone(schema)
	out["description"] = d
	return out
}
