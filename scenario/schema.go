package scenario

import (
	"encoding/json"
	"maps"
	"regexp"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/steps"
)

// schemaID names the scenario schema.
const schemaID = "https://github.com/outboxdrill/runner/docs/scenario.schema.json"

// Schema renders the JSON Schema (draft 2020-12) of a scenario file from the
// step and check registries, for editors (yaml-language-server) and tests.
func Schema() []byte {
	defs := map[string]any{}
	var names []string
	for _, d := range steps.Defs() {
		for _, name := range append([]string{d.Name}, steps.AliasesOf(d)...) {
			names = append(names, name)
			defs["step."+name] = stepSchema(name, d, defs)
		}
	}
	for _, c := range steps.Checks() {
		cs := c.Value.Schema()
		cs["description"] = c.Doc
		defs["check."+c.Name] = cs
	}
	calls, keys := shorthands()
	defs["shorthand"] = map[string]any{
		"type":        "string",
		"description": "step, step(flag) or step(key=value, ...), each parameter the step's own, each value of its type",
		"anyOf":       calls,
	}
	defs["shorthand-key"] = map[string]any{
		"type":                 "object",
		"description":          "a shorthand call as the step key (null value), with name and expect beside it",
		"properties":           map[string]any{keyName: map[string]any{"type": "string"}, keyExpect: map[string]any{"type": "object"}},
		"patternProperties":    keys,
		"additionalProperties": false,
		// at least one key that is neither name nor expect: the call
		"not": map[string]any{"propertyNames": map[string]any{"enum": []any{keyName, keyExpect}}},
	}
	defs["checks"] = checksSchema(nil, defs)
	props := map[string]any{}
	var required []string
	for _, k := range allTopKeys(broker.Kinds()) {
		props[k.Name] = k.schema()
		if k.Required {
			required = append(required, k.Name)
		}
	}
	doc := map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"$id":                  schemaID,
		"title":                "outbox drill scenario",
		"type":                 "object",
		"required":             required,
		"properties":           props,
		"patternProperties":    map[string]any{"^x-": map[string]any{}},
		"additionalProperties": false,
		"$defs":                defs,
	}
	b, _ := json.MarshalIndent(doc, "", "  ") // maps of strings and numbers: cannot fail
	return append(b, '\n')
}

// stepRefs refer to every step's schema.
func stepRefs() []any {
	var refs []any
	for _, d := range steps.Defs() {
		for _, name := range append([]string{d.Name}, steps.AliasesOf(d)...) {
			refs = append(refs, ref("step."+name))
		}
	}
	return refs
}

// violations is a list of invariant names; [] declares none.
func violations() map[string]any {
	return map[string]any{"type": "array", "items": map[string]any{"enum": history.InvariantNames()}}
}

// brokerLists are the keys of expect_violations in its map form.
func brokerLists() map[string]any {
	out := map[string]any{"default": violations()}
	for _, b := range broker.Names() {
		out[b] = violations()
	}
	return out
}

// shorthands are the patterns of each step's shorthand call: as a string
// step (one per step and alias) and as a step key (with parentheses, a
// null value). Each parameter is the step's own, each value of its type
// (steps.Param.ShorthandPattern): a misspelt parameter, an unknown flag or
// a value of another type is refused, as the loader refuses it.
func shorthands() (calls []any, keys map[string]any) {
	keys = map[string]any{}
	for _, d := range steps.Defs() {
		var args []string
		for _, p := range d.Params {
			value, bare := p.ShorthandPattern()
			if value == "" {
				continue
			}
			args = append(args, regexp.QuoteMeta(p.Name)+`\s*=\s*`+value)
			if bare != "" {
				args = append(args, bare)
			}
		}
		arg := "(?:" + strings.Join(args, "|") + ")"
		list := `\(\s*(?:` + arg + `(?:\s*,\s*` + arg + `)*)?\s*\)`
		if len(args) == 0 {
			list = `\(\s*\)`
		}
		for _, name := range append([]string{d.Name}, steps.AliasesOf(d)...) {
			calls = append(calls, map[string]any{"pattern": `^\s*` + regexp.QuoteMeta(name) + `\s*(?:` + list + `)?\s*$`})
			keys[`^\s*`+regexp.QuoteMeta(name)+`\s*`+list+`\s*$`] = map[string]any{"type": "null"}
		}
	}
	return calls, keys
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/$defs/" + name} }

// stepSchema is a step map: its step key (d's name or an alias of it) with
// parameters (or the checks, for expect), plus name and expect.
func stepSchema(key string, d *steps.Def, defs map[string]any) map[string]any {
	props := map[string]any{keyName: map[string]any{"type": "string"}}
	if d.IsExpect() {
		props[key] = ref("checks")
	} else {
		obj := steps.ParamsSchema(d.Params, "")
		alts := []any{map[string]any{"type": "null"}, obj}
		if d.NeedsAction() {
			obj["minProperties"] = 1 // broker: {} does nothing
		}
		if obj["required"] != nil || d.NeedsAction() {
			alts = alts[1:] // no parameters at all is not enough
		}
		if p, ok := d.Primary(); ok {
			alts = append(alts, p.Schema()) // `start: relay`
		}
		if _, ok := d.Primary(); !ok && len(d.Flags()) > 0 {
			alts = append(alts, map[string]any{"enum": d.Flags()}) // `broker: restart`
		}
		props[key] = map[string]any{"description": d.Doc, "anyOf": alts}
		props[keyExpect] = checksSchema(d, defs)
	}
	return map[string]any{"type": "object", "required": []string{key}, "properties": props, "additionalProperties": false}
}

// checksSchema is an expect map: the state checks, plus for a step d its
// outcome keys and error; for the expect step (d nil) within and every. Each
// check's schema and each step's broker override are defined once in defs
// and referred to, so the document grows with steps + checks, not their product.
func checksSchema(d *steps.Def, defs map[string]any) map[string]any {
	props := map[string]any{}
	for _, c := range steps.Checks() {
		props[c.Name] = ref("check." + c.Name)
	}
	override := "override.checks"
	if d != nil {
		override = "override." + d.Name
		for _, k := range d.Outcomes {
			props[k.Name] = map[string]any{"description": k.Doc, "anyOf": []any{
				map[string]any{"type": "integer", "minimum": 0}, map[string]any{"type": "boolean"}, steps.VarRef()}}
		}
	}
	// A broker's override holds the same outcomes and checks, nothing else.
	defs[override] = map[string]any{"type": "object", "minProperties": 1, "properties": maps.Clone(props), "additionalProperties": false,
		"description": "what differs on this broker: replaces the wants with the same keys there"}
	if d == nil {
		props[steps.WithinKey] = steps.DurationSchema()
		props[steps.EveryKey] = steps.DurationSchema()
	} else {
		props[steps.ErrorKey] = map[string]any{"type": []string{"string", "number"}, "minLength": 1, "description": "the step must fail with an error containing this text"}
	}
	for _, b := range broker.Names() {
		props[b] = ref(override)
	}
	return map[string]any{"type": "object", "properties": props, "additionalProperties": false}
}
