package steps

import (
	"fmt"
	"reflect"
	"sort"
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
