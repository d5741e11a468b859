package runner

import (
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"outboxdrill/steps"
)

// Keys a step map may hold besides its one step key.
const (
	keyName   = "name"
	keyExpect = "expect"
)

// parseStep decodes one item of `steps:`: a shorthand string or a map with
// exactly one step key plus optional name and expect.
func parseStep(file string, n *yaml.Node) (*steps.Call, steps.Errors) {
	switch n.Kind {
	case yaml.ScalarNode:
		name, args, errs := parseShorthand(file, n)
		if errs != nil {
			return nil, errs
		}
		return buildCall(file, steps.NodePos(file, n), name, args, nil, "")
	case yaml.MappingNode:
		return parseStepMap(file, n)
	}
	return nil, steps.Errors{steps.Errorf(steps.NodePos(file, n), "a step is a map such as {relay: {limit: 1}} or a string such as relay(skip_mark), got a %s", steps.KindName(n))}
}

func parseStepMap(file string, n *yaml.Node) (*steps.Call, steps.Errors) {
	var errs steps.Errors
	var stepKV, expectKV *steps.Arg
	label := ""
	for _, kv := range pairs(file, n, &errs) {
		switch _, isStep := steps.Lookup(kv.Key); {
		case kv.Key == keyName:
			label = scalarString(file, kv, &errs)
		case kv.Key == keyExpect:
			expectKV = &kv
		case !isStep:
			cands := append(steps.Names(), keyName, keyExpect)
			errs = append(errs, steps.Errorf(kv.KeyPos, "unknown step %q%s; steps: %s",
				kv.Key, steps.Suggest(kv.Key, cands), strings.Join(steps.Names(), ", ")))
		case stepKV != nil:
			errs = append(errs, steps.Errorf(kv.KeyPos, "a step holds exactly one step key: %q and %q are two steps; write them as two list items", stepKV.Key, kv.Key))
		default:
			stepKV = &kv
		}
	}
	if errs != nil {
		return nil, errs
	}
	if stepKV == nil {
		if expectKV == nil {
			return nil, steps.Errors{steps.Errorf(steps.NodePos(file, n), "this step has no step key; steps: %s", strings.Join(steps.Names(), ", "))}
		}
		// {expect: {...}} alone is the expect step.
		stepKV, expectKV = expectKV, nil
	}
	var args []steps.Arg
	switch v := stepKV.Value; {
	case v.Kind == yaml.MappingNode:
		args = pairs(file, v, &errs)
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
	default:
		return nil, steps.Errors{steps.Errorf(steps.NodePos(file, v), "%s: want a map of parameters such as {%s}, got %s; or write the shorthand %s(key=value)",
			stepKV.Key, exampleParam(stepKV.Key), steps.Describe(v), stepKV.Key)}
	}
	var expect []steps.Arg
	if expectKV != nil {
		if expectKV.Value.Kind != yaml.MappingNode {
			return nil, steps.Errors{steps.Errorf(steps.NodePos(file, expectKV.Value), "expect: want a map of outcome keys and checks, got %s", steps.Describe(expectKV.Value))}
		}
		expect = pairs(file, expectKV.Value, &errs)
	}
	call, cerrs := buildCall(file, stepKV.KeyPos, stepKV.Key, args, expect, label)
	return call, append(errs, cerrs...)
}

func exampleParam(step string) string {
	if d, ok := steps.Lookup(step); ok && len(d.Params) > 0 {
		return d.Params[0].Name + ": ..."
	}
	return "..."
}

// buildCall decodes args as the step's parameters (or, for expect, as its
// checks) and expect as the step's expectations.
func buildCall(file string, at steps.Pos, name string, args, expect []steps.Arg, label string) (*steps.Call, steps.Errors) {
	d, ok := steps.Lookup(name)
	if !ok {
		return nil, steps.Errors{steps.Errorf(at, "unknown step %q%s; steps: %s", name, steps.Suggest(name, steps.Names()), strings.Join(steps.Names(), ", "))}
	}
	call := &steps.Call{Def: d, Args: args, Label: label, Pos: at}
	var errs steps.Errors
	if d.IsExpect() {
		if len(args) == 0 {
			errs = append(errs, steps.Errorf(at, "expect: give at least one check, e.g. {stream.entries: 1}"))
		}
		exp, eerrs := steps.CompileExpect(d, file, args)
		call.Expect, call.Args = exp, nil
		errs = append(errs, eerrs...)
		params, perrs := d.DecodeParams(nil, at)
		call.Params = params
		return call, append(errs, perrs...)
	}
	params, perrs := d.DecodeParams(args, at)
	call.Params = params
	errs = append(errs, perrs...)
	exp, eerrs := steps.CompileExpect(d, file, expect)
	call.Expect = exp
	return call, append(errs, eerrs...)
}

var shorthandName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*`)

// parseShorthand reads `step`, `step(flag)` or `step(key=value, ...)`. Each
// value becomes a scalar node whose column points into the string, so errors
// name the exact argument.
func parseShorthand(file string, n *yaml.Node) (string, []steps.Arg, steps.Errors) {
	s := n.Value
	base := n.Column
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		base++
	}
	at := func(off int) steps.Pos { return steps.Pos{File: file, Line: n.Line, Col: base + off} }
	name := shorthandName.FindString(s)
	if name == "" {
		return "", nil, steps.Errors{steps.Errorf(at(0), "want a step such as relay or consume(fail=divzero), got %q", s)}
	}
	rest := strings.TrimRight(s[len(name):], " ")
	if rest == "" {
		return name, nil, nil
	}
	if rest[0] != '(' || rest[len(rest)-1] != ')' {
		return "", nil, steps.Errors{steps.Errorf(at(len(name)), "after %q want (key=value, ...), got %q", name, rest)}
	}
	var args []steps.Arg
	var errs steps.Errors
	off := len(name) + 1
	for _, part := range splitArgs(rest[1 : len(rest)-1]) {
		start := off + len(part) - len(strings.TrimLeft(part, " "))
		off += len(part) + 1
		p := strings.TrimSpace(part)
		if p == "" {
			errs = append(errs, steps.Errorf(at(start), "empty argument in %q", s))
			continue
		}
		key, val, hasVal := strings.Cut(p, "=")
		key = strings.TrimSpace(key)
		v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: base + start}
		if hasVal {
			vOff := start + strings.Index(p, "=") + 1
			raw := strings.TrimSpace(val)
			vOff += len(val) - len(strings.TrimLeft(val, " "))
			// An empty tag lets yaml.v3 resolve the text like a plain scalar.
			v = &yaml.Node{Kind: yaml.ScalarNode, Value: unquote(raw), Line: n.Line, Column: base + vOff}
			if raw != unquote(raw) {
				v.Tag = "!!str"
			}
		}
		args = append(args, steps.Arg{Key: key, KeyPos: at(start), Value: v})
	}
	return name, args, errs
}

// splitArgs splits on commas outside double quotes.
func splitArgs(s string) []string {
	var parts []string
	quoted, start := false, 0
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
