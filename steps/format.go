package steps

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// showValue shows a wanted or observed value the way a scenario writes
// it: YAML flow style with sorted keys, e.g. {accounting: {USD: {amount: 100, events: 1}}}.
func showValue(v any) string {
	var b strings.Builder
	formatValue(&b, reflect.ValueOf(v))
	return b.String()
}

func formatValue(b *strings.Builder, v reflect.Value) {
	switch v.Kind() {
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		b.WriteString("{")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(b, "%s: ", k.String())
			formatValue(b, v.MapIndex(k))
		}
		b.WriteString("}")
	case reflect.Struct:
		b.WriteString("{")
		for i := range v.NumField() {
			if i > 0 {
				b.WriteString(", ")
			}
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			fmt.Fprintf(b, "%s: ", name)
			formatValue(b, v.Field(i))
		}
		b.WriteString("}")
	case reflect.Slice, reflect.Array:
		b.WriteString("[")
		for i := range v.Len() {
			if i > 0 {
				b.WriteString(", ")
			}
			formatValue(b, v.Index(i))
		}
		b.WriteString("]")
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			b.WriteString("null")
			return
		}
		formatValue(b, v.Elem())
	case reflect.Invalid:
		b.WriteString("null")
	default:
		fmt.Fprint(b, v.Interface())
	}
}

// diffLines is a diff of want and got in the language's own words: one
// line per leaf, its path and value (`accounting.USD.amount: 101`), "-" for
// what only want has, "+" for what only got has, in path order. (go-cmp's
// report names Go types and fields, and indents with tabs and no-break
// spaces that a terminal shows as escapes.)
func diffLines(want, got any) string {
	w, g := flatValue(want), flatValue(got)
	paths := map[string]bool{}
	for p := range w {
		paths[p] = true
	}
	for p := range g {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	var b strings.Builder
	for _, p := range sorted {
		wv, inW := w[p]
		gv, inG := g[p]
		if inW && inG && wv == gv {
			continue
		}
		if inW {
			fmt.Fprintf(&b, "- %s\n", leafLine(p, wv))
		}
		if inG {
			fmt.Fprintf(&b, "+ %s\n", leafLine(p, gv))
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func leafLine(path, value string) string {
	if path == "" {
		return value
	}
	return path + ": " + value
}

// flatValue maps each leaf of v to its shown value, keyed by its path:
// map keys and the yaml names of struct fields joined by ".", list
// indexes as [i]. A string leaf is quoted (the text "42" is not the number
// 42); an empty map or list inside is a leaf of its own, {} or [] (the
// checks take an empty and a missing value alike only at the top).
func flatValue(v any) map[string]string {
	out := map[string]string{}
	var walk func(path string, v reflect.Value)
	join := func(path, k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Map:
			if v.Len() == 0 && path != "" {
				out[path] = "{}"
			}
			for _, k := range v.MapKeys() {
				walk(join(path, fmt.Sprint(k.Interface())), v.MapIndex(k))
			}
		case reflect.Struct:
			for i := range v.NumField() {
				name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
				walk(join(path, name), v.Field(i))
			}
		case reflect.Slice, reflect.Array:
			if v.Len() == 0 && path != "" {
				out[path] = "[]"
			}
			for i := range v.Len() {
				walk(fmt.Sprintf("%s[%d]", path, i), v.Index(i))
			}
		case reflect.Interface, reflect.Pointer:
			if v.IsNil() {
				out[path] = "null"
				return
			}
			walk(path, v.Elem())
		case reflect.Invalid:
			out[path] = "null"
		case reflect.String:
			out[path] = strconv.Quote(v.String())
		default:
			out[path] = showValue(v.Interface())
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}
