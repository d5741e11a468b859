package system

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
)

// Event says how the team's events look (the event: key): the payload the
// produce statement's ${payload} and the publish step write, and where the
// amount and the currency are in it, for the sums the checks compare with
// the projection.
type Event struct {
	// AmountPath and CurrencyPath lead to the amount and the currency in a
	// payload, one JSON key (or array index) per element: event.amount:
	// data.amountMinor is [data amountMinor]. Without event.amount, the
	// field of the template that is exactly "${amount}"; nil (the default,
	// amount) when neither. Likewise for the currency.
	AmountPath, CurrencyPath []string
	// EventIDPath leads to the event id: the field of the template that is
	// exactly "${event}"; nil (the default, event_id) without one.
	EventIDPath []string
	// AggregatePath and VersionPath lead to the aggregate key and its
	// version (event.aggregate, event.version; without them, the fields of
	// the template that are exactly "${aggregate}" and "${version}"); nil:
	// not mapped, and per-aggregate order is not judged.
	AggregatePath, VersionPath []string
	template                   tmpl // nil: the runner's own payload
}

// Templated reports whether the system file builds its own payload
// (event.payload); without it ${payload} is the runner's own JSON.
func (e Event) Templated() bool { return e.template != nil }

// PayloadVars are the ${…} a payload template may use.
var PayloadVars = []string{"aggregate", "amount", "currency", "event", "from", "to", "version"}

// numberVars become JSON numbers where a string is exactly ${name}: the
// amount a team sums and the version it orders by are numbers in its JSON.
var numberVars = []string{"amount", "version"}

// Payload renders the event.payload template with vars (PayloadVars, as
// text; "" for an unset aggregate or version). A string that is exactly
// "${amount}" or "${version}" becomes a JSON number (null when unset);
// any other ${…} is replaced as text. It is an error to call it on a
// system without a template (Event.Templated).
func (s *System) Payload(vars map[string]string) (string, error) {
	if s.Event.template == nil {
		return "", fmt.Errorf("%s has no event.payload template", s.File)
	}
	var b bytes.Buffer
	if err := s.Event.template.render(&b, vars); err != nil {
		return "", fmt.Errorf("%s: event.payload: %w", s.File, err)
	}
	return b.String(), nil
}

// tmpl is a node of a payload template.
type tmpl interface {
	render(b *bytes.Buffer, vars map[string]string) error
}

type (
	tObject struct {
		keys []string
		vals []tmpl
	}
	tArray   []tmpl
	tText    string // may hold ${…}
	tLiteral string // a JSON number, true, false or null
)

func (o tObject) render(b *bytes.Buffer, vars map[string]string) error {
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSON(b, k)
		b.WriteByte(':')
		if err := o.vals[i].render(b, vars); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

func (a tArray) render(b *bytes.Buffer, vars map[string]string) error {
	b.WriteByte('[')
	for i, v := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := v.render(b, vars); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

var integer = lazy.Regexp(`^-?[0-9]+$`)

func (t tText) render(b *bytes.Buffer, vars map[string]string) error {
	if name, ok := wholeNumberVar(string(t)); ok {
		v := vars[name]
		switch {
		case v == "":
			b.WriteString("null")
		case integer().MatchString(v):
			b.WriteString(v)
		default:
			return fmt.Errorf("${%s} is %q, not a whole number", name, v)
		}
		return nil
	}
	writeJSON(b, placeholder().ReplaceAllStringFunc(string(t), func(m string) string { return vars[m[2:len(m)-1]] }))
	return nil
}

func (l tLiteral) render(b *bytes.Buffer, _ map[string]string) error {
	b.WriteString(string(l))
	return nil
}

// wholeNumberVar reports whether s is exactly "${amount}" or "${version}".
func wholeNumberVar(s string) (string, bool) {
	m := placeholder().FindStringSubmatch(s)
	if m == nil || m[0] != s || !slices.Contains(numberVars, m[1]) {
		return "", false
	}
	return m[1], true
}

func writeJSON(b *bytes.Buffer, s string) {
	out, _ := json.Marshal(s) // a string always marshals
	b.Write(out)
}

// readEvent reads the event: key.
func readEvent(s *System, file string, kv diag.Pair, errs *diag.Errors) {
	f := fields(file, kv, []string{"payload", "amount", "currency", "aggregate", "version"}, nil, errs)
	if n := f["payload"]; n != nil {
		s.Pos["event.payload"] = diag.NodePos(file, n)
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "event: payload: want a map, the event's JSON with ${…} placeholders, got %s", diag.Describe(n)))
		} else {
			s.Event.template = readTemplate(file, n, errs)
			s.Event.EventIDPath = findText(s.Event.template, "${event}", nil)
		}
	}
	for _, p := range []struct {
		key string
		dst *[]string
	}{{"amount", &s.Event.AmountPath}, {"currency", &s.Event.CurrencyPath}, {"aggregate", &s.Event.AggregatePath}, {"version", &s.Event.VersionPath}} {
		if n := f[p.key]; n != nil {
			s.Pos["event."+p.key] = diag.NodePos(file, n)
			*p.dst = s.readPath(file, "event: "+p.key, n, errs)
		} else if s.Event.template != nil {
			// Where the template puts ${amount} is where the amount is
			// (likewise the aggregate and the version).
			*p.dst = findText(s.Event.template, "${"+p.key+"}", nil)
		}
	}
	halfOrder(s, file, f, errs)
}

// halfOrder refuses an aggregate mapped without a version, or the
// reverse, where the template supplies no field for the other: order
// would silently not be judged. The error is at the key that is written.
func halfOrder(s *System, file string, f map[string]*yaml.Node, errs *diag.Errors) {
	for _, p := range [][2]string{{"aggregate", "version"}, {"version", "aggregate"}} {
		have, lack := p[0], p[1]
		paths := map[string][]string{"aggregate": s.Event.AggregatePath, "version": s.Event.VersionPath}
		if f[have] != nil && paths[have] != nil && f[lack] == nil && paths[lack] == nil { // a written key that failed said so already
			where := "the system file has no event.payload"
			if s.Event.template != nil {
				where = fmt.Sprintf("event.payload has no field that is exactly \"${%s}\"", lack)
			}
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, f[have]), "event: %s without event.%s (%s): per-aggregate order needs both, the aggregate and its version; add %s: PATH", have, lack, where, lack))
		}
	}
}

// pathElem is one element of a dotted path: a JSON key or an array index.
// The runner builds SQL paths from them, so nothing else may hide in one.
var pathElem = lazy.Regexp(`^[A-Za-z0-9_$-]+$`)

// readPath reads a dotted path (data.amountMinor) and, when the file has
// a payload template, checks that the template has that field.
func (s *System) readPath(file, key string, n *yaml.Node, errs *diag.Errors) []string {
	text := scalar(file, key, n, errs)
	if text == "" {
		return nil
	}
	path := strings.Split(text, ".")
	for _, e := range path {
		if !pathElem().MatchString(e) {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: %q is not a dotted path such as data.amountMinor (keys of letters, digits, _, $ and -)", key, text))
			return nil
		}
	}
	if s.Event.template != nil && !hasPath(s.Event.template, path) {
		leaves := leafPaths(s.Event.template, "")
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: event.payload has no field %s%s; its fields: %s", key, text, diag.Suggest(text, leaves), strings.Join(leaves, ", ")))
		return nil
	}
	if s.Event.template == nil && !slices.Contains(OwnPayloadFields, text) {
		// Without a template the payload is the runner's own, flat JSON:
		// a path elsewhere would read nothing from any event, and the
		// verdicts it feeds would have nothing to judge.
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "%s: the runner's own payload (the system file has no event.payload) has no field %s%s; its fields: %s", key, text, ownFieldHint(key, text), strings.Join(OwnPayloadFields, ", ")))
		return nil
	}
	return path
}

// ownFieldHint is the did-you-mean of a path the runner's own payload
// lacks, for the event key named in key ("event: aggregate"): never the
// field of another of the four keys (acount is no misspelt amount where an
// aggregate was meant), else that key's own field, where the runner's
// payload carries it.
func ownFieldHint(key, text string) string {
	name := strings.TrimPrefix(key, "event: ")
	mapped := []string{"amount", "currency", "aggregate", "version"}
	candidates := slices.DeleteFunc(slices.Clone(OwnPayloadFields), func(f string) bool { return f != name && slices.Contains(mapped, f) })
	if hint := diag.Suggest(text, candidates); hint != "" {
		return hint
	}
	return fmt.Sprintf(" (did you mean %q?)", name)
}

// OwnPayloadFields are the fields of the runner's own payload, what
// ${payload} is without event.payload (pipeline.Transfer's JSON; a test
// there keeps the two the same).
var OwnPayloadFields = []string{"event_id", "from", "to", "amount", "currency", "aggregate", "version"}

// readTemplate reads a YAML value as a JSON template.
func readTemplate(file string, n *yaml.Node, errs *diag.Errors) tmpl {
	switch n.Kind {
	case yaml.MappingNode:
		var o tObject
		for _, kv := range diag.Pairs(file, n, errs) {
			o.keys = append(o.keys, kv.Key)
			o.vals = append(o.vals, readTemplate(file, kv.Value, errs))
		}
		return o
	case yaml.SequenceNode:
		a := tArray{}
		for _, e := range n.Content {
			a = append(a, readTemplate(file, e, errs))
		}
		return a
	case yaml.ScalarNode:
		return readScalar(file, n, errs)
	}
	*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "event: payload: %s is not JSON: write the value out", diag.Describe(n)))
	return tLiteral("null")
}

// readScalar reads a YAML scalar as JSON: numbers, booleans and null as
// themselves, anything else as a string whose ${…} are checked here.
func readScalar(file string, n *yaml.Node, errs *diag.Errors) tmpl {
	switch n.ShortTag() {
	case "!!null":
		return tLiteral("null")
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err == nil {
			if f, ok := v.(float64); !ok || !math.IsInf(f, 0) && !math.IsNaN(f) {
				if out, err := json.Marshal(v); err == nil {
					return tLiteral(out)
				}
			}
		}
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "event: payload: %s is no JSON value; quote it to make it a string", diag.Describe(n)))
		return tLiteral("null")
	}
	for _, m := range placeholder().FindAllStringSubmatch(n.Value, -1) {
		if !slices.Contains(PayloadVars, m[1]) {
			*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "event: payload: unknown ${%s}%s; a payload uses %s", m[1], diag.Suggest(m[1], PayloadVars), strings.Join(PayloadVars, ", ")))
		}
	}
	return tText(n.Value)
}

// child is the value at key (an object key or an array index) of t.
func child(t tmpl, key string) (tmpl, bool) {
	switch v := t.(type) {
	case tObject:
		if i := slices.Index(v.keys, key); i >= 0 {
			return v.vals[i], true
		}
	case tArray:
		if i, err := strconv.Atoi(key); err == nil && i >= 0 && i < len(v) {
			return v[i], true
		}
	}
	return nil, false
}

func hasPath(t tmpl, path []string) bool {
	for _, k := range path {
		var ok bool
		if t, ok = child(t, k); !ok {
			return false
		}
	}
	return true
}

// leafPaths lists the dotted paths of t's values that are not objects or
// arrays, in template order: the candidates of a misspelt path.
func leafPaths(t tmpl, prefix string) []string {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	var out []string
	switch v := t.(type) {
	case tObject:
		for i, k := range v.keys {
			out = append(out, leafPaths(v.vals[i], join(k))...)
		}
	case tArray:
		for i, e := range v {
			out = append(out, leafPaths(e, join(strconv.Itoa(i)))...)
		}
	default:
		out = append(out, prefix)
	}
	return out
}

// findText is the path of the first string of t that is exactly text, or
// nil.
func findText(t tmpl, text string, prefix []string) []string {
	switch v := t.(type) {
	case tObject:
		for i, k := range v.keys {
			if p := findText(v.vals[i], text, append(slices.Clip(prefix), k)); p != nil {
				return p
			}
		}
	case tArray:
		for i, e := range v {
			if p := findText(e, text, append(slices.Clip(prefix), strconv.Itoa(i))); p != nil {
				return p
			}
		}
	case tText:
		if string(v) == text {
			return slices.Clip(prefix)
		}
	}
	return nil
}
