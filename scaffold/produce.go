package scaffold

import (
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

var placeholder = lazy.Regexp(`\$\{([^}]*)\}`)

// Produce is the producer transaction init writes: an INSERT into the
// outbox of its NOT NULL columns without a default, the event id and the
// payload bound (${event}, ${payload}), every other column a value that
// fits its type.
type Produce struct {
	SQL string // with ${…}, as the system file writes it
	// Literals are the columns given a made-up value, each "col = value",
	// for the comment that says to check them.
	Literals []string
}

// BuildProduce builds the outbox's INSERT with eventID and payload as
// the event id and payload columns. A NOT NULL column without a default
// whose type init cannot make a value for is an error naming it.
func BuildProduce(t *Table, eventID, payload *Column) (Produce, error) {
	cols := []string{Ident(eventID.Name), Ident(payload.Name)}
	vals := []string{"${event}", "${payload}" + cast(payload.Type)}
	var p Produce
	for _, c := range t.Columns {
		if c == eventID || c == payload || !c.NotNull || c.Default {
			continue
		}
		v, ok := valueFor(c)
		if !ok {
			return Produce{}, fmt.Errorf("%s.%s is NOT NULL without a default and of type %s, for which init has no value: write produce: yourself (an INSERT into %s binding ${event} and ${payload})",
				t.Ref(), c.Name, c.Type, t.Ref())
		}
		cols, vals = append(cols, Ident(c.Name)), append(vals, v)
		if !strings.HasPrefix(v, "${") {
			p.Literals = append(p.Literals, c.Name+" = "+v)
		}
	}
	p.SQL = fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", t.Ref(), strings.Join(cols, ", "), strings.Join(vals, ", "))
	return p, nil
}

// cast is the cast ${payload}, a text parameter, needs for a column of type t.
func cast(t string) string {
	if jsonType(t) {
		return "::" + t
	}
	return ""
}

// valueFor is a value of column c's type: a bound ${amount} or
// ${currency} where the name says so, else a literal.
func valueFor(c *Column) (string, bool) {
	switch {
	case numericType(c.Type) && like(c.Name, amountWords):
		return "${amount}", true
	case textType(c.Type) && like(c.Name, currencyWords):
		return "${currency}", true
	case c.Enum != "":
		return "'" + strings.ReplaceAll(c.Enum, "'", "''") + "'", true
	case textType(c.Type):
		return "'" + c.Name + "'", true
	case numericType(c.Type):
		return "0", true
	case c.Type == "boolean":
		return "false", true
	case strings.HasPrefix(c.Type, "timestamp"):
		return "now()", true
	case c.Type == "date":
		return "current_date", true
	case c.Type == "uuid":
		return "gen_random_uuid()", true
	case jsonType(c.Type):
		return "'{}'", true
	case c.Type == "bytea":
		return `'\x'`, true
	case strings.HasSuffix(c.Type, "[]"):
		return "'{}'", true
	}
	return "", false
}

// Bind is the SQL with its ${…} turned into $1, $2 … and the names in
// that order, as the runner binds a produce statement.
func Bind(sql string) (string, []string) {
	var names []string
	out := placeholder().ReplaceAllStringFunc(sql, func(m string) string {
		name := m[2 : len(m)-1]
		for i, n := range names {
			if n == name {
				return fmt.Sprintf("$%d", i+1)
			}
		}
		names = append(names, name)
		return fmt.Sprintf("$%d", len(names))
	})
	return out, names
}
