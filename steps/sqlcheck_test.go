package steps

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

func TestSQLCheckParse(t *testing.T) {
	for src, want := range map[string]string{
		`{db: producer, query: "SELECT 1"}`:          "missing want",
		`{db: prod, query: "SELECT 1", want: 1}`:     "db: want producer or consumer",
		`{db: producer, query: "SELECT 1", wnat: 1}`: `unknown key "wnat" (did you mean "want"?)`,
		`{db: producer, query: "", want: 1}`:         "query: want a SQL query",
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(src), &n); err != nil {
			t.Fatal(err)
		}
		_, errs := parseSQLWant("f.yaml", n.Content[0])
		if len(errs) == 0 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%s: %v; want %q", src, errs, want)
		}
	}
}

// Rows read back as PostgreSQL's JSON compare with what YAML wrote: one
// value, a list of values, or a list of rows; a difference is a diff that
// names the column.
func TestSQLCheckShapes(t *testing.T) {
	row := func(s string) map[string]any {
		r, _, err := decodeRow([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if got := shapeRows([]map[string]any{row(`{"n": 3}`)}, []string{"n"}); got != int64(3) {
		t.Errorf("one value: %#v", got)
	}
	if got := shapeRows([]map[string]any{row(`{"n": 1.5}`), row(`{"n": "x"}`)}, []string{"n"}); !cmp.Equal(got, []any{1.5, "x"}) {
		t.Errorf("one column: %#v", got)
	}
	var want any
	if err := yaml.Unmarshal([]byte(`[{id: a, n: 1}]`), &want); err != nil {
		t.Fatal(err)
	}
	got := shapeRows([]map[string]any{row(`{"id": "a", "n": 2}`)}, []string{"id", "n"})
	msg, bad := diffValues(sqlWant{Want: normalize(want)}, got)
	if want := "want [{id: a, n: 1}]\n got [{id: a, n: 2}]\n(-want +got)\n- [0].n: 1\n+ [0].n: 2"; !bad || msg != want {
		t.Errorf("diff %q: want %q, naming column n with both values", msg, want)
	}
	if _, bad := diffValues(sqlWant{Want: normalize([]any{map[string]any{"id": "a", "n": 2}})}, got); bad {
		t.Error("equal rows differ")
	}
}
