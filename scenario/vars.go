package scenario

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// varRef matches ${name} in a scalar.
var varRef = lazy.Regexp(`\$\{([^}]*)\}`)

var varName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*$`)

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
	if !varName().MatchString(kv.Key) {
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

// Expansion bounds. A ${name} copies the variable's value wherever it is
// used, so a few bytes can stand for very many: vars each using the one
// before twice (b: "${a}${a}", c: "${b}${b}", …) double with every line,
// and 30 of them in a 637-byte file made 7.4 GB. So what expansion adds,
// over a whole file and all its variants, may be at most what the file
// itself may be (guardfile.Scenario.Max: a scenario that needs more is
// not a scenario someone wrote), and a variable may use variables at most
// maxVarDepth deep (no one writes a chain that long; it bounds the work
// before the bytes run out). The first variable or use past either is an
// error at its definition or use; its value stays as written.
const maxVarDepth = 16

// maxExpansion is what ${…} may add to a file, in bytes (a var: tests
// lower it).
var maxExpansion = guardfile.Scenario.Max

// expansion is what is left of a file's expansion budget.
type expansion struct {
	left     int64
	reported bool // the budget's end is reported once per file
}

func newExpansion() *expansion { return &expansion{left: maxExpansion} }

// take spends n bytes, if there are that many left.
func (e *expansion) take(n int) bool {
	if int64(n) > e.left {
		e.left = -1
		return false
	}
	e.left -= int64(n)
	return true
}

// overflow reports the end of the budget at pos, once.
func (e *expansion) overflow(pos diag.Pos, what string, errs *diag.Errors) {
	if e.reported {
		return
	}
	e.reported = true
	*errs = append(*errs, diag.Errorf(pos, "%s: expanding ${…} makes more than %s (each use copies the value; a scenario file may be at most that): use fewer or shorter values",
		what, guardfile.Size(maxExpansion)))
}

// substitute returns a deep copy of n with ${name} replaced in every scalar
// (keys too). Line and column stay those of the file.
func substitute(file string, n *yaml.Node, vars map[string]string, exp *expansion, errs *diag.Errors) *yaml.Node {
	c := *n
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		c.Value = varRef().ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := vars[name]
			if ok && !exp.take(len(v)) {
				exp.overflow(diag.NodePos(file, n), ref, errs)
				return ref
			}
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
		whole := varRef().FindString(n.Value) == n.Value
		if n.Style == 0 || whole && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			c.Tag, c.Style = "", 0
		}
	}
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = substitute(file, k, vars, exp, errs)
	}
	return &c
}

// substituteText replaces the ${name}s it knows in a name or description;
// an unknown one stays as written (the steps are where it would matter).
// Past the expansion budget it stays as written too (substitute reports it).
func substituteText(s string, vars map[string]string, exp *expansion) string {
	return varRef().ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := vars[ref[2:len(ref)-1]]; ok && exp.take(len(v)) {
			return v
		}
		return ref
	})
}

// resolveVars replaces the variables a variable's value uses (vars: {n: 5,
// ev: "pay-${n}"}, a matrix value too), each once; a variable that comes
// back to itself is an error at its definition, its value left as written,
// and so is one past the expansion bounds (maxVarDepth, exp). A name no
// variable has (a system placeholder, ${stream}) stays.
func resolveVars(vars map[string]string, pos map[string]diag.Pos, exp *expansion, errs *diag.Errors) map[string]string {
	out := make(map[string]string, len(vars))
	depth := map[string]int{} // 1 for a value that uses no variable
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
		state[name], depth[name] = visiting, 1
		over := false
		v := varRef().ReplaceAllStringFunc(vars[name], func(ref string) string {
			used := ref[2 : len(ref)-1]
			switch {
			case over:
			case hasVar(vars, used):
				u := visit(used, append(path, name))
				depth[name] = max(depth[name], depth[used]+1)
				if over = depth[name] > maxVarDepth || !exp.take(len(u)); !over {
					return u
				}
			case !slices.Contains(system.Placeholders, used):
				*errs = append(*errs, diag.Errorf(pos[name], "variable %q uses undefined variable %q%s", name, used,
					diag.Suggest(used, append(slices.Sorted(maps.Keys(vars)), system.Placeholders...))))
			}
			return ref
		})
		if over {
			v = vars[name] // as written: what uses it grows no further
			if depth[name] > maxVarDepth {
				*errs = append(*errs, diag.Errorf(pos[name], "variable %q uses variables more than %d deep (one using one using …): write the value out", name, maxVarDepth))
				depth[name] = 1 // reported here, not again at each that uses it
			} else {
				exp.overflow(pos[name], "variable "+strconv.Quote(name), errs)
			}
		}
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
