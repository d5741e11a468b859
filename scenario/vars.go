package scenario

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// varRef matches ${name} in a scalar.
var varRef = regexp.MustCompile(`\$\{([^}]*)\}`)

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// axis is one matrix dimension: a variable and the values it takes.
type axis struct {
	name   string
	values []string
}

// parseVars reads `vars:`, a map of name → scalar.
func parseVars(file string, n *yaml.Node, pos map[string]diag.Pos, errs *diag.Errors) map[string]string {
	vars := map[string]string{}
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "vars: want a map of name → value, e.g. {amount: 5}"))
		return vars
	}
	for _, kv := range diag.Pairs(file, n, errs) {
		if !checkVarName(kv, errs) {
			continue
		}
		pos[kv.Key] = diag.NodePos(file, kv.Value)
		if kv.Value.Kind == yaml.SequenceNode && len(kv.Value.Content) > 0 && kv.Value.Content[0].Kind == yaml.ScalarNode {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "%s: want a single value, got a list; one variant per value is matrix: {%s: [...]}", kv.Key, kv.Key))
			vars[kv.Key] = kv.Value.Content[0].Value // defined: its uses are not undefined too
			continue
		}
		if scalarValue(file, kv, errs) {
			vars[kv.Key] = kv.Value.Value
		}
	}
	return vars
}

// parseMatrix reads `matrix:`, a map of name → list of scalars, in file order.
func parseMatrix(file string, n *yaml.Node, pos map[string]diag.Pos, errs *diag.Errors) []axis {
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "matrix: want a map of name → list, e.g. {amount: [1, 5]}"))
		return nil
	}
	var axes []axis
	for _, kv := range diag.Pairs(file, n, errs) {
		if !checkVarName(kv, errs) {
			continue
		}
		if kv.Value.Kind != yaml.SequenceNode || len(kv.Value.Content) == 0 {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "matrix: %s: want a non-empty list of values, e.g. [1, 5]", kv.Key))
			continue
		}
		a := axis{name: kv.Key}
		pos[kv.Key] = kv.KeyPos
		for _, v := range kv.Value.Content {
			if !scalarValue(file, steps.Arg{Key: kv.Key, Value: v}, errs) {
				continue
			}
			if slices.Contains(a.values, v.Value) {
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, v), "matrix: %s: %s given twice (each value makes one variant)", kv.Key, v.Value))
				continue
			}
			a.values = append(a.values, v.Value)
		}
		axes = append(axes, a)
	}
	return axes
}

func checkVarName(kv steps.Arg, errs *diag.Errors) bool {
	if !varName.MatchString(kv.Key) {
		*errs = append(*errs, diag.Errorf(kv.KeyPos, "variable name %q: use letters, digits and _", kv.Key))
		return false
	}
	return true
}

func scalarValue(file string, kv steps.Arg, errs *diag.Errors) bool {
	if kv.Value.Kind != yaml.ScalarNode || kv.Value.ShortTag() == "!!null" {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, kv.Value), "%s: want a single value, got %s", kv.Key, diag.Describe(kv.Value)))
		return false
	}
	return true
}

// maxVariants bounds the scenarios one file may expand into.
const maxVariants = 1000

// variantCount is how many variants the axes make, up to maxVariants+1.
func variantCount(axes []axis) int {
	n := 1
	for _, a := range axes {
		n *= len(a.values)
		if n > maxVariants {
			return maxVariants + 1
		}
	}
	return n
}

// variant is one combination of matrix values, in axis order.
type variant []struct{ name, value string }

// Label is the suffix of the variant's scenario name: "[amount=5 currency=EUR]".
func (v variant) Label() string {
	parts := make([]string, len(v))
	for i, b := range v {
		parts[i] = b.name + "=" + b.value
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// combinations is the cartesian product of the axes, the first axis
// outermost; no axes give one empty variant.
func combinations(axes []axis) []variant {
	out := []variant{nil}
	for _, a := range axes {
		if len(out)*len(a.values) > maxVariants {
			return nil // parseHeader reports it
		}
		var next []variant
		for _, v := range out {
			for _, val := range a.values {
				next = append(next, append(slices.Clone(v), struct{ name, value string }{a.name, val}))
			}
		}
		out = next
	}
	return out
}

// substitute returns a deep copy of n with ${name} replaced in every scalar
// (keys too). Line and column stay those of the file.
func substitute(file string, n *yaml.Node, vars map[string]string, errs *diag.Errors) *yaml.Node {
	c := *n
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		c.Value = varRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := vars[name]
			if !ok && slices.Contains(system.Placeholders, name) {
				return ref // a team's service gets it when it starts (the stream, a proxy's URL, …)
			}
			if !ok {
				defined := "no variable is defined (vars: or matrix:)"
				if len(vars) > 0 {
					defined = "defined: " + strings.Join(slices.Sorted(maps.Keys(vars)), ", ")
				}
				*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "undefined variable %q%s; %s",
					name, diag.Suggest(name, append(slices.Sorted(maps.Keys(vars)), system.Placeholders...)), defined))
			}
			return v
		})
		// A plain scalar, or one that is nothing but "${name}" (quoted only
		// because YAML flow maps need it), takes the type of its value.
		whole := varRef.FindString(n.Value) == n.Value
		if n.Style == 0 || whole && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			c.Tag, c.Style = "", 0
		}
	}
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = substitute(file, k, vars, errs)
	}
	return &c
}

// substituteText replaces the ${name}s it knows in a name or description;
// an unknown one stays as written (the steps are where it would matter).
func substituteText(s string, vars map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := vars[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// resolveVars replaces the variables a variable's value uses (vars: {n: 5,
// ev: "pay-${n}"}, a matrix value too), each once; a variable that comes
// back to itself is an error at its definition, its value left as written.
// A name no variable has (a system placeholder, ${stream}) stays.
func resolveVars(vars map[string]string, pos map[string]diag.Pos, errs *diag.Errors) map[string]string {
	out := make(map[string]string, len(vars))
	const visiting, done = 1, 2
	state := map[string]int{}
	var visit func(name string, path []string) string
	visit = func(name string, path []string) string {
		switch state[name] {
		case done:
			return out[name]
		case visiting:
			i := slices.Index(path, name)
			*errs = append(*errs, diag.Errorf(pos[name], "variable %q uses itself: %s", name, strings.Join(append(path[i:], name), " → ")))
			return vars[name]
		}
		state[name] = visiting
		v := varRef.ReplaceAllStringFunc(vars[name], func(ref string) string {
			used := ref[2 : len(ref)-1]
			switch {
			case hasVar(vars, used):
				return visit(used, append(path, name))
			case !slices.Contains(system.Placeholders, used):
				*errs = append(*errs, diag.Errorf(pos[name], "variable %q uses undefined variable %q%s", name, used,
					diag.Suggest(used, append(slices.Sorted(maps.Keys(vars)), system.Placeholders...))))
			}
			return ref
		})
		state[name], out[name] = done, v
		return v
	}
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		visit(name, nil)
	}
	return out
}

func hasVar(vars map[string]string, name string) bool {
	_, ok := vars[name]
	return ok
}
