package scaffold

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// text is a column value as a comparable string: numbers as written,
// JSON values as JSON; isNull for SQL NULL.
func text(v any) (s string, isNull bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		return v, false
	case json.Number:
		return v.String(), false
	case bool:
		return fmt.Sprint(v), false
	}
	b, _ := json.Marshal(v)
	return string(b), false
}

// columnsHolding are the columns of row whose value is want, in the
// table's column order.
func columnsHolding(t *Table, row map[string]any, want string) []*Column {
	var out []*Column
	for _, c := range t.Columns {
		if s, null := text(row[c.Name]); !null && s == want {
			out = append(out, c)
		}
	}
	return out
}

// decodeJSON reads a JSON value (a jsonb column's value as to_jsonb gave
// it, or a text column holding JSON), numbers kept exact.
func decodeJSON(v any) (any, bool) {
	if s, ok := v.(string); ok {
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		var out any
		if dec.Decode(&out) != nil {
			return nil, false
		}
		return out, true
	}
	return v, v != nil
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b any) bool {
	x, ok1 := decodeJSON(a)
	y, ok2 := decodeJSON(b)
	if !ok1 || !ok2 {
		return false
	}
	bx, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return bytes.Equal(bx, by)
}

// pathTo is the dotted path to the first number in v equal to want
// (object keys in sorted order, array indexes), "" when there is none.
func pathTo(v any, want string) string {
	switch v := v.(type) {
	case json.Number:
		if v.String() == want {
			return "."
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if p := pathTo(v[k], want); p != "" {
				return join(k, p)
			}
		}
	case []any:
		for i, e := range v {
			if p := pathTo(e, want); p != "" {
				return join(fmt.Sprint(i), p)
			}
		}
	}
	return ""
}

func join(k, rest string) string {
	if rest == "." {
		return k
	}
	return k + "." + rest
}

// changed are the columns whose value differs between before and after.
func changed(t *Table, before, after map[string]any) []*Column {
	var out []*Column
	for _, c := range t.Columns {
		b, bn := text(before[c.Name])
		a, an := text(after[c.Name])
		if b != a || bn != an {
			out = append(out, c)
		}
	}
	return out
}

// rowWith is the row of rs whose column col holds want, nil without one.
func rowWith(rs rows, col, want string) map[string]any {
	for _, r := range rs {
		if s, null := text(r[col]); !null && s == want {
			return r
		}
	}
	return nil
}

// gained are the rows of after that before lacks (compared as JSON).
func gained(before, after rows) rows {
	seen := map[string]int{}
	for _, r := range before {
		b, _ := json.Marshal(r)
		seen[string(b)]++
	}
	var out rows
	for _, r := range after {
		b, _ := json.Marshal(r)
		if seen[string(b)] > 0 {
			seen[string(b)]--
			continue
		}
		out = append(out, r)
	}
	return out
}

// show is a value for a comment: short, quoted when text.
func show(v any) string {
	s, null := text(v)
	if null {
		return "NULL"
	}
	s = shorten(s, 40)
	if _, ok := v.(string); ok {
		return "'" + s + "'"
	}
	return s
}
