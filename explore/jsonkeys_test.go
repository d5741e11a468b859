package explore

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestJSONKeysSnakeCase: the named types explore's --json report holds
// (the boundary map, a random run, a shard, a finding's shrinking) name
// every field by a snake_case json tag, never by Go's field name (the map
// once said "Services", "Boundaries", "Pos": {"File", "Line", "Col"}).
func TestJSONKeysSnakeCase(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[Map](), reflect.TypeFor[RandomResult](), reflect.TypeFor[ShardInfo](), reflect.TypeFor[Shrinking]()} {
		if bad := goNamed(typ, map[reflect.Type]bool{}); len(bad) > 0 {
			t.Errorf("%s: fields without a snake_case json tag: %v", typ, bad)
		}
	}
	type leaky struct{ Nth int }
	if bad := goNamed(reflect.TypeFor[leaky](), map[reflect.Type]bool{}); len(bad) != 1 {
		t.Errorf("a Go-named field went unseen: %v", bad)
	}
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// goNamed are the fields reachable from t that json names by their Go
// name or by a key that is not snake_case.
func goNamed(t reflect.Type, seen map[reflect.Type]bool) []string {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return goNamed(t.Elem(), seen)
	case reflect.Struct:
	default:
		return nil
	}
	if seen[t] {
		return nil
	}
	seen[t] = true
	var bad []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if !snake.MatchString(name) {
			bad = append(bad, t.String()+"."+f.Name)
		}
		bad = append(bad, goNamed(f.Type, seen)...)
	}
	return bad
}
