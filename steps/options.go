package steps

import (
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
)

// A broker kind's scenario options (broker.Kind.Options, written under a
// top-level key such as kafka:) are a struct with the tags of a step's
// parameters, decoded, documented and schema'd by the same code, so the
// loader, the reference and the JSON Schema cannot drift apart.

// optionsType is the struct type of proto (a struct or a pointer to one).
func optionsType(proto any) reflect.Type {
	t := reflect.TypeOf(proto)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// OptionsParams are the options of proto's struct, read from its tags.
func OptionsParams(proto any) []Param { return paramsOf(optionsType(proto)) }

// DefaultOptions is a new options struct of proto's type holding its
// defaults: what a scenario without the key gets.
func DefaultOptions(proto any) any {
	t := optionsType(proto)
	v, _ := decodeWith(t, paramsOf(t), nil, diag.Pos{}, paramWords)
	return v
}

// DecodeOptions reads n, the value of the top-level key key, into a new
// options struct of proto's type (a pointer): its defaults, then n's keys.
// Errors are a step parameter's, worded for the key:
// `file:line:col: kafka: unknown key "x" (did you mean "y"?); known: …`.
func DecodeOptions(file, key string, proto any, n *yaml.Node) (any, diag.Errors) {
	t := optionsType(proto)
	specs := paramsOf(t)
	if n.Kind != yaml.MappingNode {
		var names []string
		for _, p := range specs {
			names = append(names, p.Name)
		}
		return DefaultOptions(proto), diag.Errors{diag.Errorf(diag.NodePos(file, n), "%s: want a map with %s", key, strings.Join(names, ", "))}
	}
	var errs diag.Errors
	pairs := diag.Pairs(file, n, &errs)
	v, verrs := decodeWith(t, specs, pairs, diag.NodePos(file, n), wording{key + ": ", "key"})
	return v, append(errs, verrs...)
}

// OptionsSchema is the JSON Schema of a key holding proto's options: its
// keys typed, no other key allowed. No ${name}: a top-level key is not
// substituted.
func OptionsSchema(proto any, doc string) map[string]any {
	return paramsSchema(paramsOf(optionsType(proto)), doc, false)
}
