package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
)

// sqlWant is the sql check's value: a query on one database and the rows
// it must return. Rows are compared as JSON values (to_jsonb of each row),
// so any column type compares exactly as PostgreSQL renders it: one row of
// one column is that value, one column is a list of values, else a list of
// maps column → value, in the query's order.
type sqlWant struct {
	DB, Query string
	Want      any
}

func (w sqlWant) String() string { return showValue(w.Want) }

// wanted is what observe's result is compared with.
func (w sqlWant) wanted() any { return w.Want }

var kindSQL = ValueKind{"map {db: producer or consumer, query: SQL, want: a value, a list of values, or a list of rows}", parseSQLWant, func() map[string]any {
	return map[string]any{"type": "object", "additionalProperties": false, "required": []string{"db", "query", "want"},
		"properties": map[string]any{
			"db":    map[string]any{"enum": []string{"producer", "consumer"}},
			"query": map[string]any{"type": "string", "minLength": 1},
			"want":  map[string]any{},
		}}
}}

// sqlCheck is the sql: check.
var sqlCheck = &Check{Name: "sql", Value: kindSQL, observe: observeSQL,
	Doc: "any query on the producer or consumer database and what it must return: one row of one column is that value, one column a list, else a list of maps column → value (compared as PostgreSQL's JSON of each row, in the query's order)"}

var sqlKeys = []string{"db", "query", "want"}

func parseSQLWant(file string, n *yaml.Node) (any, diag.Errors) {
	var w sqlWant
	seen := map[string]bool{}
	errs := eachPair(file, n, func(k string, v *yaml.Node) *diag.Error {
		seen[k] = true
		switch k {
		case "db":
			if v.Value != "producer" && v.Value != "consumer" || v.Kind != yaml.ScalarNode {
				return diag.Errorf(diag.NodePos(file, v), "db: want producer or consumer, got %s", diag.Describe(v))
			}
			w.DB = v.Value
		case "query":
			if v.Kind != yaml.ScalarNode || strings.TrimSpace(v.Value) == "" {
				return diag.Errorf(diag.NodePos(file, v), "query: want a SQL query, got %s", diag.Describe(v))
			}
			w.Query = v.Value
		case "want":
			var raw any
			if err := v.Decode(&raw); err != nil {
				return diag.Errorf(diag.NodePos(file, v), "want: %v", err)
			}
			w.Want = normalize(raw)
		default:
			return diag.Errorf(diag.NodePos(file, v), "unknown key %q%s; keys: %s", k, diag.Suggest(k, sqlKeys), strings.Join(sqlKeys, ", "))
		}
		return nil
	})
	for _, k := range sqlKeys {
		if !seen[k] && len(errs) == 0 {
			errs = append(errs, diag.Errorf(diag.NodePos(file, n), "missing %s; keys: %s", k, strings.Join(sqlKeys, ", ")))
		}
	}
	return w, errs
}

func observeSQL(ctx context.Context, env *Env, want any) (any, error) {
	w := want.(sqlWant)
	db := env.Producer
	if w.DB == "consumer" {
		db = env.Consumer
	}
	rows, err := db.Query(ctx, "SELECT to_jsonb(q) FROM ("+strings.TrimRight(strings.TrimSpace(w.Query), ";")+") AS q")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []map[string]any
	var cols []string
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		row, names, err := decodeRow(raw)
		if err != nil {
			return nil, err
		}
		out, cols = append(out, row), names
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if cols == nil { // no row: the column names come from the statement
		for _, f := range rows.FieldDescriptions() {
			cols = append(cols, f.Name)
		}
	}
	return shapeRows(out, cols), nil
}

// decodeRow reads one row's JSON object, numbers as int64 when integral,
// and its keys in column order.
func decodeRow(raw []byte) (map[string]any, []string, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var row map[string]any
	if err := dec.Decode(&row); err != nil {
		return nil, nil, fmt.Errorf("decode a row: %w", err)
	}
	for k, v := range row {
		row[k] = normalize(v)
	}
	keys := make([]string, 0, len(row))
	for k := range row {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return row, keys, nil
}

// shapeRows: one column of one row is its value, one column is a list,
// otherwise the rows themselves.
func shapeRows(rows []map[string]any, cols []string) any {
	if len(cols) != 1 {
		list := make([]any, len(rows))
		for i, r := range rows {
			list[i] = r
		}
		return list
	}
	vals := make([]any, len(rows))
	for i, r := range rows {
		vals[i] = r[cols[0]]
	}
	if len(vals) == 1 {
		return vals[0]
	}
	return vals
}

// normalize makes YAML- and JSON-decoded values compare: integers as
// int64, other numbers as float64, maps with string keys.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	case map[string]any:
		for k := range x {
			x[k] = normalize(x[k])
		}
		return x
	}
	return v
}
