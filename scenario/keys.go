package scenario

import (
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
)

// topKey is one top-level key of a scenario file: how it is read into the
// file's header, its JSON Schema and its line in the reference. The loader,
// the schema and the reference all read topKeys, so they cannot disagree.
type topKey struct {
	Name     string
	Required bool
	Doc      string        // reference text (Markdown)
	doc      func() string // the reference text when it names what is known only at run time (the registered brokers); over Doc
	parse    func(file string, kv steps.Arg, h *header, errs *diag.Errors)
	schema   func() map[string]any
}

// topKeys are the keys of a scenario file, in the order the reference lists
// them, but for a broker kind's own key (nats:), which allTopKeys adds. The
// keys defined in files of their own are listed here too, by name: the
// order is this list's, not that of the files' init functions.
var topKeys = []*topKey{
	{Name: "name", Required: true, Doc: "the scenario's name, unique across the files of a run",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.Name, h.Pos = scalarString(file, kv, errs), diag.NodePos(file, kv.Value)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "string", "minLength": 1, "description": "the scenario's name, unique across the files of a run"}
		}},
	{Name: "description", Doc: "plain words: which window it opens, what must hold",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.Description = scalarString(file, kv, errs)
		},
		schema: func() map[string]any { return map[string]any{"type": "string"} }},
	{Name: "tags", Doc: "a list of words, e.g. `[seed, outbox]` (one word may stand alone: `tags: seed`)",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.Tags = parseTags(file, kv.Value, errs)
		},
		schema: func() map[string]any {
			word := map[string]any{"type": "string", "pattern": "^[^ ,]+$"}
			return map[string]any{"anyOf": []any{word, map[string]any{"type": "array", "items": word}}}
		}},
	{Name: "expect_violations", Doc: "the history invariants this scenario breaks on purpose (an anti-pattern showing its damage), e.g. `[lost]` (`[]` declares none), or a map broker → list with `default` for the others; each must occur (see [History checker](#history-checker))",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.ExpectViolations, h.ViolationsPos = parseViolations(file, kv.Value, kindNames(h.kinds), errs), diag.NodePos(file, kv.Value)
		},
		schema: func() map[string]any {
			return map[string]any{"description": "history invariants this scenario breaks on purpose; each must occur. A list for every broker, or a map broker → list with default for the others",
				"anyOf": []any{violations(), map[string]any{"type": "object", "additionalProperties": false, "properties": brokerLists()}}}
		}},
	{Name: "vars", Doc: "a map of name → value; `${name}` in any step (params, expectations, even keys) is replaced; a value may use other variables, matrix ones too (`event: pay-${n}`)",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.vars = parseVars(file, kv.Value, h.varPos, errs)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "object", "additionalProperties": scalarSchema(), "propertyNames": map[string]any{"pattern": varName().String()}}
		}},
	{Name: "matrix", Doc: "a map of name → list of values: one variant per combination, named `name [amount=5 currency=EUR]`",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.axes = parseMatrix(file, kv.Value, h.varPos, errs)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "array", "minItems": 1, "items": scalarSchema()}, "propertyNames": map[string]any{"pattern": varName().String()}}
		}},
	brokerDLQKey(), brokerKey(), notJudgedKey(), systemKey(), settleKey(),
	{Name: "steps", Required: true, Doc: "the list of steps, run in order; the first failing step ends the scenario",
		parse: func(_ string, kv steps.Arg, h *header, _ *diag.Errors) { h.stepsNode = kv.Value },
		schema: func() map[string]any {
			return map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"anyOf": append([]any{ref("shorthand"), ref("shorthand-key")}, stepRefs()...)}}
		}},
}

// allTopKeys are the keys of a scenario file read against kinds in the
// reference's order: the broker kinds' own keys (brokeropts.go) follow
// broker_dlq.
func allTopKeys(kinds []*broker.Kind) []*topKey {
	i := slices.IndexFunc(topKeys, func(k *topKey) bool { return k.Name == "broker_dlq" }) + 1
	return slices.Concat(topKeys[:i], brokerTopKeys(kinds), topKeys[i:])
}

func lookupTopKey(name string, kinds []*broker.Kind) (*topKey, bool) {
	keys := allTopKeys(kinds)
	i := slices.IndexFunc(keys, func(k *topKey) bool { return k.Name == name })
	if i < 0 {
		return nil, false
	}
	return keys[i], true
}

func topKeyNames(kinds []*broker.Kind) []string {
	var names []string
	for _, k := range allTopKeys(kinds) {
		names = append(names, k.Name)
	}
	return names
}

// scalarSchema is a variable's value: any scalar.
func scalarSchema() map[string]any {
	return map[string]any{"type": []string{"string", "number", "boolean"}}
}

// topKeysReference is the reference's table of top-level keys, the
// registered kinds' own among them.
func topKeysReference() string {
	var b strings.Builder
	b.WriteString("| key | | meaning |\n|---|---|---|\n")
	for _, k := range allTopKeys(broker.Kinds()) {
		req := " |"
		if k.Required {
			req = " required |"
		}
		doc := k.Doc
		if k.doc != nil {
			doc = k.doc()
		}
		b.WriteString("| `" + k.Name + "` |" + req + " " + doc + " |\n")
	}
	b.WriteString("| `x-…` | | ignored: a place for YAML anchors (`x-base: &base {amount: 5}`, then `produce: {<<: *base}`) and notes |\n")
	return b.String()
}
