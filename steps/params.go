package steps

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/outboxdrill/runner/diag"

	"gopkg.in/yaml.v3"
)

// Arg is one parameter as written in a scenario: `key: value` in a map, or
// `key=value` / a bare flag in the shorthand (then Value is a synthesized
// scalar node carrying the column inside the string).
type Arg = diag.Pair

// Param documents one field of a step's parameter struct. It is read from the
// struct tags, so decoding, validation and the reference cannot drift apart:
//
//	param:"name"     the key users write
//	doc:"..."        one line for the reference
//	default:"..."    decoded like user input before the user's values
//	enum:"a|b"       the allowed values of a string
//	min:"1"          the smallest allowed integer
//	fault:"yes"      the parameter injects a fault (reports mark it)
//	required:"yes"   the step cannot run without it
//	primary:"yes"    a scalar written as the step's whole value is this
//	                 parameter: `start: relay` is `start: {service: relay}`
//
// A parameter is a scalar (string, integer, duration, flag), a map of
// strings (map[string]string), or a struct of parameters of its own,
// written as a nested map.
type Param struct {
	Name     string
	Doc      string
	Default  string
	Enum     []string
	Min, Max *int64 // an integer's bounds (tags min, max), if any
	Fault    bool
	Required bool
	Primary  bool
	index    []int // field path: embedded structs share their parameters
	typ      reflect.Type
}

var durationType = reflect.TypeOf(time.Duration(0))

// Type names the parameter's type for the reference.
func (p Param) Type() string {
	t := p.typ
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Map:
		return "map of strings"
	case t.Kind() == reflect.Struct:
		names := make([]string, 0)
		for _, q := range paramsOf(t) {
			names = append(names, q.Name)
		}
		return "map: " + strings.Join(names, ", ")
	case len(p.Enum) > 0:
		return strings.Join(p.Enum, " \\| ")
	case t == durationType:
		return "duration"
	case t.Kind() == reflect.Bool:
		return "flag"
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		switch {
		case p.Min != nil && p.Max != nil:
			return fmt.Sprintf("integer %d–%d", *p.Min, *p.Max)
		case p.Min != nil:
			return fmt.Sprintf("integer ≥ %d", *p.Min)
		}
		return "integer"
	}
	return "string"
}

// paramsOf reads the Param list of a parameter struct type; the fields of
// an embedded struct count as its own, in place.
func paramsOf(t reflect.Type) []Param {
	var ps []Param
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for _, p := range paramsOf(f.Type) {
				p.index = append([]int{i}, p.index...)
				ps = append(ps, p)
			}
			continue
		}
		name := f.Tag.Get("param")
		if name == "" {
			continue
		}
		p := Param{Name: name, Doc: f.Tag.Get("doc"), Default: f.Tag.Get("default"), Fault: f.Tag.Get("fault") == "yes", Required: f.Tag.Get("required") == "yes", Primary: f.Tag.Get("primary") == "yes", index: []int{i}, typ: f.Type}
		if e := f.Tag.Get("enum"); e != "" {
			p.Enum = strings.Split(e, "|")
		}
		for _, b := range []struct {
			tag string
			to  **int64
		}{{"min", &p.Min}, {"max", &p.Max}} {
			if m := f.Tag.Get(b.tag); m != "" {
				v, err := strconv.ParseInt(m, 10, 64)
				if err != nil {
					panic(fmt.Sprintf("%s.%s: bad %s tag %q", t.Name(), f.Name, b.tag, m))
				}
				*b.to = &v
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// decodeParams fills a new parameter struct: defaults first, then args.
// Every problem is returned, each at its own position.
func decodeParams(t reflect.Type, specs []Param, args []Arg, stepPos diag.Pos) (any, diag.Errors) {
	return decodeWith(t, specs, args, stepPos, paramWords)
}

// wording is how decode errors name what they are about: a step's
// parameters, or the options under a top-level key (`kafka: unknown key`).
type wording struct{ prefix, noun string }

var paramWords = wording{"", "parameter"}

// decodeWith is decodeParams with errors worded by w.
func decodeWith(t reflect.Type, specs []Param, args []Arg, stepPos diag.Pos, w wording) (any, diag.Errors) {
	ptr := reflect.New(t)
	v := ptr.Elem()
	setDefaults(t, v, specs)
	var errs diag.Errors
	seen, bad := map[string]bool{}, map[string]bool{} // bad: did not decode
	names := make([]string, len(specs))
	for i, p := range specs {
		names[i] = p.Name
	}
	for _, a := range args {
		p, ok := findParam(specs, a.Key)
		switch {
		case !ok:
			errs = append(errs, diag.Errorf(a.KeyPos, "%sunknown %s %q%s; known: %s", w.prefix, w.noun, a.Key, diag.Suggest(a.Key, names), strings.Join(names, ", ")))
		case seen[a.Key]:
			errs = append(errs, diag.Errorf(a.KeyPos, "%s%s %q given twice", w.prefix, w.noun, a.Key))
		default:
			seen[a.Key] = true
			before := len(errs)
			if f := v.FieldByIndex(p.index); nested(f.Type()) {
				errs = append(errs, setNested(f, p, a, stepPos.File)...)
			} else if err := setField(f, p, a.Value); err != nil {
				errs = append(errs, diag.Errorf(diag.NodePos(stepPos.File, a.Value), "%s%s: %v", w.prefix, a.Key, err))
			}
			bad[a.Key] = len(errs) > before
		}
	}
	for _, p := range specs {
		if p.Required && !seen[p.Name] {
			errs = append(errs, diag.Errorf(stepPos, "%smissing %s %q: %s", w.prefix, w.noun, p.Name, p.Doc))
			bad[p.Name] = true
		}
	}
	_, apart := ptr.Interface().(eachParam)
	if vd, ok := ptr.Interface().(interface{ Validate() error }); ok && (len(errs) == 0 || apart) {
		errs = append(errs, validated(vd.Validate(), len(errs) > 0, bad, args, stepPos, w)...)
	}
	return ptr.Interface(), errs
}

// eachParam is a parameter struct whose Validate checks parameters apart
// (OwnParamErrorf): it runs even when another parameter did not decode.
// Other Validates run only on a struct that decoded whole.
type eachParam interface{ validatesEachParam() }

// validated are the problems a Validate returned (each of a joined error
// at its own parameter). After a decode error only those about one
// parameter alone (OwnParamErrorf) stand, and not about that parameter:
// the others may rest on a value that did not decode.
func validated(err error, decodeFailed bool, bad map[string]bool, args []Arg, stepPos diag.Pos, w wording) diag.Errors {
	if err == nil {
		return nil
	}
	all := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	}
	var errs diag.Errors
	for _, e := range all {
		var pe *paramError
		if decodeFailed && (!errors.As(e, &pe) || !pe.own || bad[pe.Param]) {
			continue
		}
		errs = append(errs, diag.Errorf(validatePos(e, args, stepPos), "%s%v", w.prefix, e))
	}
	return errs
}

// setDefaults decodes each parameter's default tag into v, as user input.
func setDefaults(t reflect.Type, v reflect.Value, specs []Param) {
	for _, p := range specs {
		if p.Default == "" {
			continue
		}
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: p.Default}
		if err := setField(v.FieldByIndex(p.index), p, n); err != nil {
			panic(fmt.Sprintf("%s: default of %s: %v", t.Name(), p.Name, err)) // a bug in our tags
		}
	}
}

// Nested lists the parameters of a nested map parameter (none otherwise).
func (p Param) Nested() []Param {
	t := p.typ
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return paramsOf(t)
}

// nested reports whether a parameter is written as a map: a map of
// strings or a struct of parameters.
func nested(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Map || t.Kind() == reflect.Struct
}

// setNested decodes a map parameter: each value a scalar string for a map
// of strings; the struct's own parameters (typed, unknown keys refused,
// each error at its own position) for a struct.
func setNested(f reflect.Value, p Param, a Arg, file string) diag.Errors {
	if a.Value.Kind != yaml.MappingNode {
		return diag.Errors{diag.Errorf(diag.NodePos(file, a.Value), "%s: want a map (%s), got %s", a.Key, p.Type(), diag.Describe(a.Value))}
	}
	var errs diag.Errors
	pairs := diag.Pairs(file, a.Value, &errs)
	t := f.Type()
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		m := reflect.MakeMap(t)
		for _, kv := range pairs {
			if kv.Value.Kind != yaml.ScalarNode || kv.Value.ShortTag() == "!!null" {
				errs = append(errs, diag.Errorf(diag.NodePos(file, kv.Value), "%s.%s: want a string value, got %s", a.Key, kv.Key, diag.Describe(kv.Value)))
				continue
			}
			m.SetMapIndex(reflect.ValueOf(kv.Key), reflect.ValueOf(kv.Value.Value))
		}
		f.Set(m)
		return errs
	}
	v, verrs := decodeParams(t, paramsOf(t), pairs, a.KeyPos)
	if f.Kind() == reflect.Pointer {
		f.Set(reflect.ValueOf(v))
	} else {
		f.Set(reflect.ValueOf(v).Elem())
	}
	return append(errs, verrs...)
}

// paramError is a Validate error about one parameter: it is reported at
// that parameter's key when the step names it, else at the step. own: it
// rests on that parameter's value alone, so it is said even when another
// parameter did not decode (validate reports every problem at once).
type paramError struct {
	Param string
	Msg   string
	own   bool
}

func (e *paramError) Error() string { return e.Msg }

// ParamErrorf returns a paramError about param. A Validate may return
// several, joined (errors.Join).
func ParamErrorf(param, format string, args ...any) error {
	return &paramError{Param: param, Msg: fmt.Sprintf(format, args...)}
}

// OwnParamErrorf is ParamErrorf about a problem of param's value alone.
func OwnParamErrorf(param, format string, args ...any) error {
	return &paramError{Param: param, Msg: fmt.Sprintf(format, args...), own: true}
}

func validatePos(err error, args []Arg, stepPos diag.Pos) diag.Pos {
	var pe *paramError
	if errors.As(err, &pe) {
		for _, a := range args {
			if a.Key == pe.Param {
				return a.KeyPos
			}
		}
	}
	return stepPos
}

func findParam(specs []Param, name string) (Param, bool) {
	for _, p := range specs {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// setField decodes one scalar node into f. The text of the scalar is what
// counts, so `amount: 5` and the shorthand `amount=5` behave the same.
func setField(f reflect.Value, p Param, n *yaml.Node) error {
	if f.Kind() == reflect.Pointer {
		f.Set(reflect.New(f.Type().Elem()))
		f = f.Elem()
	}
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a single %s value, got a %s", p.Type(), diag.KindName(n))
	}
	isNull := n.ShortTag() == "!!null"
	switch {
	case f.Kind() == reflect.Bool:
		if isNull {
			f.SetBool(true) // `{skip_mark}` or a bare flag: the flag is set
			return nil
		}
		b, err := strconv.ParseBool(n.Value)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", n.Value)
		}
		f.SetBool(b)
	case isNull:
		return fmt.Errorf("needs a value (%s)", p.Type())
	case f.Type() == durationType:
		d, err := parseMillis(n.Value)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", n.Value)
		}
		if p.Min != nil && i < *p.Min {
			return fmt.Errorf("must be at least %d, got %d", *p.Min, i)
		}
		if p.Max != nil && i > *p.Max {
			return fmt.Errorf("must be at most %d, got %d", *p.Max, i)
		}
		f.SetInt(i)
	case f.Kind() == reflect.String:
		if len(p.Enum) > 0 && !contains(p.Enum, n.Value) {
			return fmt.Errorf("unknown value %q%s; allowed: %s", n.Value, diag.Suggest(n.Value, p.Enum), strings.Join(p.Enum, ", "))
		}
		if n.Value == "" {
			return fmt.Errorf("must not be empty")
		}
		f.SetString(n.Value)
	default:
		panic("steps: unsupported parameter type " + f.Type().String())
	}
	return nil
}

// parseDuration accepts Go durations ("250ms", "1s") and a bare 0. Any other
// bare number is refused: "5" could mean 5ms or 5s.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%q needs a unit (did you mean \"%sms\" or \"%ss\"?)", s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 0, 250ms or 2s, got %q", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, got %s", s)
	}
	return d, nil
}

// parseMillis is parseDuration at the language's resolution, a millisecond:
// a step's or a wait's duration finer than that would be read as something
// the runner cannot do (a 100µs sleep, a poll every 250µs), so it is refused.
func parseMillis(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil || d%time.Millisecond == 0 {
		return d, err
	}
	up := (d + time.Millisecond - 1).Truncate(time.Millisecond)
	return 0, fmt.Errorf("durations have millisecond resolution, got %s (did you mean %q?)", s, up.String())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// durationPattern is what parseDuration accepts, as a JSON Schema pattern.
const durationPattern = `^(0|([0-9]+(\.[0-9]*)?(ms|s|m|h))+)$`

// Schema is the parameter's JSON Schema, derived from the same tags that
// drive decoding. A scalar may also be a ${name} reference.
func (p Param) Schema() map[string]any { return p.schema(true) }

// schema is Schema; vars: a scalar may be a ${name} reference (steps are
// substituted, a top-level key's options are not).
func (p Param) schema(vars bool) map[string]any {
	t := p.typ
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var s map[string]any
	switch {
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": map[string]any{"type": []string{"string", "integer", "boolean"}}, "description": p.Doc}
	case t.Kind() == reflect.Struct:
		return paramsSchema(paramsOf(t), p.Doc, vars)
	case len(p.Enum) > 0:
		s = map[string]any{"enum": p.Enum}
	case t == durationType:
		s = DurationSchema()
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": []string{"boolean", "null"}, "description": p.Doc}
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		s = map[string]any{"type": "integer"}
		if p.Min != nil {
			s["minimum"] = *p.Min
		}
		if p.Max != nil {
			s["maximum"] = *p.Max
		}
	default:
		s = map[string]any{"type": []string{"string", "integer"}, "minLength": 1}
	}
	if !vars {
		s["description"] = p.Doc
		return s
	}
	return map[string]any{"anyOf": []any{s, varRefSchema()}, "description": p.Doc}
}

// ShorthandPattern is a regular expression of the parameter's value as a
// shorthand call writes it (consume(count=2)): its type's text, a quoted
// string or a ${name} reference; "" for a parameter a shorthand cannot
// hold (a map, a fault). Bare is what p alone stands for: a flag (a
// boolean), or a primary parameter's value (sleep(100ms)).
func (p Param) ShorthandPattern() (value, bare string) {
	t := p.typ
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A ${name} anywhere in a value (${d}ms, ${n}0): typed once substituted.
	const quoted, ref = `"[^"]*"|'[^']*'`, `[^,]*\$\{[A-Za-z_][A-Za-z0-9_]*\}[^,]*`
	var v string
	switch {
	case t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return "", ""
	case len(p.Enum) > 0:
		v = strings.Join(quoteMetas(p.Enum), "|")
	case t == durationType:
		v = `0|[0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h)([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))*`
	case t.Kind() == reflect.Bool:
		v = `true|false|True|False|TRUE|FALSE|t|f|T|F|1|0` // strconv.ParseBool's
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		v = `[-+]?[0-9]+`
	default:
		v = `[^\s,"'][^,]*?` // up to the next comma: = and parentheses inside too
	}
	value = "(?:" + v + "|" + quoted + "|" + ref + ")"
	switch {
	case t.Kind() == reflect.Bool:
		bare = regexp.QuoteMeta(p.Name)
	case p.Primary:
		bare = value
	}
	return value, bare
}

func quoteMetas(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = regexp.QuoteMeta(s)
	}
	return out
}

// varRefSchema is the schema of a value holding a ${name} reference.
func varRefSchema() map[string]any {
	return map[string]any{"type": "string", "pattern": `\$\{[A-Za-z_][A-Za-z0-9_]*\}`}
}

// DurationSchema is the JSON Schema of a duration: "250ms", "2s" or 0.
func DurationSchema() map[string]any {
	return map[string]any{"anyOf": []any{map[string]any{"type": "string", "pattern": durationPattern}, map[string]any{"const": 0}}}
}

// ParamsSchema is the JSON Schema of a map of parameters: its keys typed,
// the required ones required, no other key allowed.
func ParamsSchema(ps []Param, doc string) map[string]any { return paramsSchema(ps, doc, true) }

func paramsSchema(ps []Param, doc string, vars bool) map[string]any {
	props := map[string]any{}
	var required []string
	for _, q := range ps {
		props[q.Name] = q.schema(vars)
		if q.Required {
			required = append(required, q.Name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	if doc != "" {
		s["description"] = doc
	}
	return s
}
