package scenario

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/steps"
)

// Keys a step map may hold besides its one step key.
const (
	keyName   = "name"
	keyExpect = "expect"
)

// parseStep decodes one item of `steps:`: a shorthand string or a map with
// exactly one step key plus optional name and expect. brokers are the
// names its expect may override for.
func parseStep(file string, n *yaml.Node, brokers []string) (*steps.Call, diag.Errors) {
	switch n.Kind {
	case yaml.ScalarNode:
		name, args, errs := parseShorthand(file, n)
		if errs != nil {
			return nil, errs
		}
		bareToPrimary(name, args)
		return buildCall(file, diag.NodePos(file, n), name, args, nil, "", brokers)
	case yaml.MappingNode:
		return parseStepMap(file, n, brokers)
	}
	return nil, diag.Errors{diag.Errorf(diag.NodePos(file, n), "a step is a map such as {relay: {limit: 1}} or a string such as relay(skip_mark), got a %s", diag.KindName(n))}
}

// parseStepMap decodes a step map. It goes on after a problem so that every
// problem of the step is reported at once.
func parseStepMap(file string, n *yaml.Node, brokers []string) (*steps.Call, diag.Errors) {
	var errs diag.Errors
	k := sortStepKeys(file, diag.Pairs(file, n, &errs), &errs)
	stepKV, expectKV := k.step, k.expect
	if stepKV == nil {
		if expectKV == nil {
			if k.unknown == 0 {
				errs = append(errs, diag.Errorf(diag.NodePos(file, n), "this step has no step key; steps: %s", strings.Join(steps.Names(), ", ")))
			}
			return nil, errs
		}
		// {expect: {...}} alone is the expect step.
		stepKV, expectKV = expectKV, nil
	}
	args, ok := stepArgs(file, stepKV, k.shorthand, &errs)
	if !ok {
		return nil, errs
	}
	var expect []steps.Arg
	if expectKV != nil {
		if v := expectKV.Value; v.Kind == yaml.MappingNode {
			expect = diag.Pairs(file, v, &errs)
		} else {
			errs = append(errs, diag.Errorf(diag.NodePos(file, v), "expect: want a map of outcome keys and checks, got %s", diag.Describe(v)))
		}
	}
	call, cerrs := buildCall(file, stepKV.KeyPos, stepKV.Key, args, expect, k.label, brokers)
	return call, append(errs, cerrs...)
}

// stepKeys are the keys of a step map, sorted: its one step key (or a
// shorthand call as the key: relay(skip_mark)), its expect and its name.
type stepKeys struct {
	step, expect *steps.Arg
	shorthand    bool // the step key is a shorthand call
	label        string
	unknown      int // keys that are none of these, each said in errs
}

// sortStepKeys sorts a step map's keys, saying what is wrong with any.
func sortStepKeys(file string, kvs []steps.Arg, errs *diag.Errors) stepKeys {
	var k stepKeys
	var unknown []steps.Arg
	for _, kv := range kvs {
		switch _, isStep := steps.Lookup(kv.Key); {
		case kv.Key == keyName:
			k.label = scalarString(file, kv, errs)
		case kv.Key == keyExpect:
			k.expect = &kv
		case !isStep && isShorthandCall(kv.Key) && k.step == nil:
			k.step, k.shorthand = &kv, true
		case !isStep:
			unknown = append(unknown, kv)
		case k.step != nil:
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "a step holds exactly one step key: %q and %q are two steps; write them as two list items", k.step.Key, kv.Key))
		default:
			k.step = &kv
		}
	}
	for _, kv := range unknown {
		if k.step != nil { // beside a step key, a typo is most likely of name or expect
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "unknown key %q beside step %q%s; a step map holds one step key plus name and expect",
				kv.Key, k.step.Key, diag.Suggest(kv.Key, append([]string{keyName, keyExpect}, steps.Names()...))))
			continue
		}
		*errs = append(*errs, diag.Errorf(kv.KeyPos, "unknown step %q%s; steps: %s",
			kv.Key, suggestStep(kv.Key, append(steps.Names(), keyName, keyExpect)), strings.Join(steps.Names(), ", ")))
	}
	k.unknown = len(unknown)
	return k
}

// stepArgs reads the step key's value as its parameters (a map, a
// primary value, a flag, nothing), or the shorthand call's; it renames
// stepKV.Key to the step of a shorthand call. !ok: the call is malformed.
func stepArgs(file string, stepKV *steps.Arg, shorthandKey bool, errs *diag.Errors) (args []steps.Arg, ok bool) {
	switch v := stepKV.Value; {
	case shorthandKey:
		// `relay(skip_mark):` beside expect: the key is the shorthand call.
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: stepKV.Key, Line: stepKV.KeyPos.Line, Column: stepKV.KeyPos.Col}
		name, sargs, serrs := parseShorthand(file, key)
		*errs = append(*errs, serrs...)
		if name == "" { // the call itself is malformed (relay(skip_mark)::): said above
			return nil, false
		}
		bareToPrimary(name, sargs)
		stepKV.Key, args = name, sargs
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!null" {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "%s: a shorthand key takes no value (its parameters are in the parentheses); put expect beside it", stepKV.Key))
		}
	case v.Kind == yaml.MappingNode:
		args = diag.Pairs(file, v, errs)
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
	case v.Kind == yaml.ScalarNode && primary(stepKV.Key) == "" && isFlag(stepKV.Key, v.Value):
		// `broker: restart` is broker(restart): the value names a flag. (A
		// step with a primary keeps it: `start: restart` starts a service
		// named restart, as it always did.)
		args = []steps.Arg{{Key: v.Value, KeyPos: diag.NodePos(file, v), Value: &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: v.Line, Column: v.Column}}}
	case v.Kind == yaml.ScalarNode && primary(stepKV.Key) != "":
		args = []steps.Arg{{Key: primary(stepKV.Key), KeyPos: diag.NodePos(file, v), Value: v}}
	case stepKV.Key == keyExpect:
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "expect: want a map of checks such as {stream.entries: 1}, got %s", diag.Describe(v)))
	default:
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "%s: want a map of parameters such as {%s}, got %s; or write the shorthand %s(key=value)%s",
			stepKV.Key, exampleParam(stepKV.Key), diag.Describe(v), stepKV.Key, flagHint(stepKV.Key, v)))
	}
	return args, true
}

// suggestStep is the did-you-mean of an unknown step name; a check's name
// says where checks go.
func suggestStep(name string, names []string) string {
	if slices.Contains(steps.CheckNames(), name) {
		return fmt.Sprintf(" (%s is a check: write it in an expect step, expect: {%s: ...})", name, name)
	}
	return diag.Suggest(name, names)
}

// primary names the parameter a scalar value of step stands for, or "".
func primary(step string) string {
	if d, ok := steps.Lookup(step); ok {
		if p, ok := d.Primary(); ok {
			return p.Name
		}
	}
	return ""
}

// isShorthandCall reports whether key is a step's shorthand call with its
// parentheses, relay(skip_mark): a step key that expect can stand beside.
func isShorthandCall(key string) bool {
	name := shorthandName().FindString(key)
	_, ok := steps.Lookup(name)
	return ok && strings.HasPrefix(strings.TrimLeft(key[len(name):], " "), "(")
}

// isFlag reports whether name is a flag parameter of step.
func isFlag(step, name string) bool {
	d, ok := steps.Lookup(step)
	return ok && slices.Contains(d.Flags(), name)
}

// flagHint names the flags a scalar step value may be, nearest first.
func flagHint(step string, v *yaml.Node) string {
	d, ok := steps.Lookup(step)
	if !ok || v.Kind != yaml.ScalarNode || len(d.Flags()) == 0 {
		return ""
	}
	return fmt.Sprintf("; a single value names a flag: %s%s", strings.Join(d.Flags(), ", "), diag.Suggest(v.Value, d.Flags()))
}

// bareToPrimary turns the one bare word of a shorthand call that names no
// parameter into the value of the step's primary parameter: sleep(100ms)
// is sleep(for=100ms), slot(drop) is slot(action=drop). A word that names a
// parameter stays a flag, and a second bare word is left to be reported.
func bareToPrimary(step string, args []steps.Arg) {
	d, ok := steps.Lookup(step)
	if !ok {
		return
	}
	p, ok := d.Primary()
	if !ok || slices.ContainsFunc(args, func(a steps.Arg) bool { return a.Key == p.Name }) {
		return
	}
	known := func(name string) bool {
		return slices.ContainsFunc(d.Params, func(q steps.Param) bool { return q.Name == name })
	}
	for i, a := range args {
		if a.Value.Tag == "!!null" && a.Value.Value == "" && !known(a.Key) {
			v := *a.Value
			v.Tag, v.Value, v.Column = "", a.Key, a.KeyPos.Col
			args[i] = steps.Arg{Key: p.Name, KeyPos: a.KeyPos, Value: &v}
			return
		}
	}
}

func exampleParam(step string) string {
	if d, ok := steps.Lookup(step); ok && len(d.Params) > 0 {
		return d.Params[0].Name + ": ..."
	}
	return "..."
}

// buildCall decodes args as the step's parameters (or, for expect, as its
// checks) and expect as the step's expectations, which may override for
// brokers.
func buildCall(file string, at diag.Pos, name string, args, expect []steps.Arg, label string, brokers []string) (*steps.Call, diag.Errors) {
	d, ok := steps.Lookup(name)
	if !ok {
		return nil, diag.Errors{diag.Errorf(at, "unknown step %q%s; steps: %s", name, suggestStep(name, steps.Names()), strings.Join(steps.Names(), ", "))}
	}
	call := &steps.Call{Def: d, Args: args, Label: label, Pos: at}
	var errs diag.Errors
	if d.IsExpect() {
		if len(args) == 0 {
			errs = append(errs, diag.Errorf(at, "expect: give at least one check, e.g. {stream.entries: 1}"))
		}
		exp, eerrs := steps.CompileExpect(d, file, args, brokers)
		call.Expect, call.Args = exp, nil
		errs = append(errs, eerrs...)
		if len(args) > 0 && len(eerrs) == 0 && len(exp.Checks) == 0 && len(exp.Outcomes) == 0 {
			errs = append(errs, diag.Errorf(at, "expect: within and every wait for checks, and there is none; give at least one, e.g. {stream.entries: 1, within: 2s}"))
		}
		params, perrs := d.DecodeParams(nil, at)
		call.Params = params
		return call, append(errs, perrs...)
	}
	params, perrs := d.DecodeParams(args, at)
	call.Params = params
	errs = append(errs, perrs...)
	exp, eerrs := steps.CompileExpect(d, file, expect, brokers)
	call.Expect = exp
	return call, append(errs, eerrs...)
}

var shorthandName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_.]*`)

// parseShorthand reads `step`, `step(flag)` or `step(key=value, ...)`. Each
// value becomes a scalar node whose column points into the string, so errors
// name the exact argument. Values may be quoted with "…" or '…' to hold
// commas or parentheses.
func parseShorthand(file string, n *yaml.Node) (string, []steps.Arg, diag.Errors) {
	base := n.Column
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		base++
	}
	lead := len(n.Value) - len(strings.TrimLeft(n.Value, " \t\r\n"))
	s := strings.TrimSpace(n.Value)
	at := func(off int) diag.Pos { return diag.Pos{File: file, Line: n.Line, Col: base + lead + off} }
	name := shorthandName().FindString(s)
	if name == "" {
		return "", nil, diag.Errors{diag.Errorf(at(0), "want a step such as relay or consume(fail=divzero), got %q", s)}
	}
	rest := strings.TrimLeft(s[len(name):], " ")
	open := len(s) - len(rest) // offset of "(" in s
	if rest == "" {
		return name, nil, nil
	}
	if rest[0] != '(' || rest[len(rest)-1] != ')' {
		return "", nil, diag.Errors{diag.Errorf(at(len(name)), "after %q want (key=value, ...), got %q", name, rest)}
	}
	inner := rest[1 : len(rest)-1]
	if strings.TrimSpace(inner) == "" {
		return name, nil, nil // relay() is relay
	}
	parts, err := splitArgs(inner)
	if err != nil {
		return "", nil, diag.Errors{diag.Errorf(at(open+1), "%v in %q", err, s)}
	}
	var args []steps.Arg
	var errs diag.Errors
	off := open + 1
	for _, part := range parts {
		start := off + len(part) - len(strings.TrimLeft(part, " "))
		off += len(part) + 1
		p := strings.TrimSpace(part)
		if p == "" {
			errs = append(errs, diag.Errorf(at(start), "empty argument in %q", s))
			continue
		}
		key, val, hasVal := strings.Cut(p, "=")
		key = strings.TrimSpace(key)
		if key == "" {
			errs = append(errs, diag.Errorf(at(start), "a parameter name is missing before %q in %q", "="+val, s))
			continue
		}
		v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: at(start).Col}
		if hasVal {
			raw := strings.TrimSpace(val)
			vOff := start + len(key) + strings.Index(p[len(key):], "=") + 1 + len(val) - len(strings.TrimLeft(val, " "))
			// An empty tag lets yaml.v3 resolve the text like a plain scalar;
			// a quoted value stays a string.
			v = &yaml.Node{Kind: yaml.ScalarNode, Value: raw, Line: n.Line, Column: at(vOff).Col}
			if unq, quoted := unquote(raw); quoted {
				v.Value, v.Tag = unq, "!!str"
			}
		}
		args = append(args, steps.Arg{Key: key, KeyPos: at(start), Value: v})
	}
	return name, args, errs
}

// splitArgs splits on commas outside quotes.
func splitArgs(s string) ([]string, error) {
	var parts []string
	var quote rune
	start := 0
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == ',':
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	return append(parts, s[start:]), nil
}

// unquote strips one pair of matching quotes.
func unquote(s string) (string, bool) {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1], true
	}
	return s, false
}
