package scaffold

import (
	"slices"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Words in column names that say what a column holds, as teams name them.
var (
	eventIDWords  = []string{"event", "message", "msg", "key", "uuid", "id"}
	payloadWords  = []string{"payload", "data", "body", "message", "event", "content", "json"}
	markerWords   = []string{"sent", "publish", "processed", "shipped", "dispatch", "relayed", "delivered", "emitted", "forwarded", "pushed"}
	pendingWords  = []string{"pending", "unsent", "unpublished", "unprocessed"}
	consumerWords = []string{"consumer", "handler", "subscriber", "group", "listener", "processor", "service", "subscription"}
	currencyWords = []string{"currency", "ccy"}
	amountWords   = []string{"amount", "total", "sum", "balance", "minor", "value"}
	countWords    = []string{"events", "count", "cnt", "num", "n"}
)

// like reports whether name contains one of words as a word part
// (published_at is like "publish"; "n" only as a whole part: n, event_n).
func like(name string, words []string) bool {
	parts := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return r == '_' || r == '-' })
	for _, w := range words {
		for _, p := range append(parts, strings.ToLower(name)) {
			if p == w || len(w) > 2 && strings.Contains(p, w) {
				return true
			}
		}
	}
	return false
}

// Type families, as format_type names types.
func idType(t string) bool {
	return slices.Contains([]string{"text", "character varying", "character", "citext", "uuid", "smallint", "integer", "bigint"}, t)
}
func jsonType(t string) bool    { return t == "json" || t == "jsonb" }
func payloadType(t string) bool { return jsonType(t) || t == "text" }
func timeType(t string) bool    { return strings.HasPrefix(t, "timestamp") || t == "date" }
func numericType(t string) bool {
	return slices.Contains([]string{"smallint", "integer", "bigint", "numeric", "real", "double precision"}, t)
}
func textType(t string) bool {
	return slices.Contains([]string{"text", "character varying", "character", "citext"}, t)
}

// Marker is an outbox column that says whether a row was published, and
// the condition true for the rows not yet published.
type Marker struct {
	Column      *Column
	Unpublished string
}

// Outbox is a table that looks like an outbox: an event id column, a
// payload column, an unpublished marker, each ranked best first.
type Outbox struct {
	Table    *Table
	EventIDs []*Column
	Payloads []*Column
	Markers  []Marker
}

// Outboxes are the producer tables that look like an outbox, best first.
func Outboxes(cat *Catalog) []*Outbox {
	var out []*Outbox
	for _, t := range cat.Tables {
		o := &Outbox{Table: t, EventIDs: eventIDColumns(t), Payloads: payloadColumns(t), Markers: markers(t)}
		if len(o.EventIDs) > 0 && len(o.Payloads) > 0 && len(o.Markers) > 0 {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b *Outbox) int { return rankName(b.Table.Name, "outbox") - rankName(a.Table.Name, "outbox") })
	return out
}

func rankName(name, word string) int {
	if strings.Contains(strings.ToLower(name), word) {
		return 1
	}
	return 0
}

// eventIDColumns are the columns that can carry an event id: of a type
// event ids are made for, NOT NULL and unique alone; one without a
// default (the producer sets it) and one named like an event id first.
func eventIDColumns(t *Table) []*Column {
	var out []*Column
	for _, c := range t.Columns {
		if idType(c.Type) && c.NotNull && t.Unique(c.Name) {
			out = append(out, c)
		}
	}
	score := func(c *Column) int {
		s := 0
		if !c.Default {
			s += 4
		}
		if like(c.Name, []string{"event", "message", "msg"}) {
			s += 2
		}
		if like(c.Name, eventIDWords) {
			s++
		}
		return s
	}
	slices.SortStableFunc(out, func(a, b *Column) int { return score(b) - score(a) })
	return out
}

// payloadColumns are the JSON columns, then the text ones named like a
// payload.
func payloadColumns(t *Table) []*Column {
	var out []*Column
	for _, c := range t.Columns {
		if jsonType(c.Type) || c.Type == "text" && like(c.Name, payloadWords) {
			out = append(out, c)
		}
	}
	score := func(c *Column) int {
		s := 0
		if jsonType(c.Type) {
			s += 2
		}
		if like(c.Name, payloadWords) {
			s++
		}
		return s
	}
	slices.SortStableFunc(out, func(a, b *Column) int { return score(b) - score(a) })
	return out
}

// markers are the columns that can say a row was published: a nullable
// timestamp, or a boolean, named like sent, published, processed, shipped
// (or, the other way round, pending).
func markers(t *Table) []Marker {
	var out []Marker
	for _, c := range t.Columns {
		q := Ident(c.Name)
		switch {
		case timeType(c.Type) && !c.NotNull && like(c.Name, markerWords):
			out = append(out, Marker{c, q + " IS NULL"})
		case c.Type == "boolean" && like(c.Name, markerWords):
			out = append(out, Marker{c, "NOT " + q})
		case c.Type == "boolean" && like(c.Name, pendingWords):
			out = append(out, Marker{c, q})
		}
	}
	return out
}

// Inbox is a table that looks like an inbox: unique over a consumer
// column and an event id column, with a payload column.
type Inbox struct {
	Table                      *Table
	Consumer, EventID, Payload *Column
}

// Inboxes are the consumer tables that look like an inbox, the ones named
// like one first.
func Inboxes(cat *Catalog) []*Inbox {
	var out []*Inbox
	for _, t := range cat.Tables {
		for _, u := range t.Uniques {
			if in := inboxOf(t, u); in != nil {
				out = append(out, in)
				break
			}
		}
	}
	slices.SortStableFunc(out, func(a, b *Inbox) int {
		return rankName(b.Table.Name, "inbox") + rankName(b.Table.Name, "processed") - rankName(a.Table.Name, "inbox") - rankName(a.Table.Name, "processed")
	})
	return out
}

// inboxOf is t as an inbox by its unique index u, nil when u is not over
// a consumer column and an event id column or t has no payload column.
func inboxOf(t *Table, u []string) *Inbox {
	if len(u) < 2 {
		return nil
	}
	in := &Inbox{Table: t}
	for _, name := range u {
		c := t.Column(name)
		switch {
		case in.Consumer == nil && textType(c.Type) && like(name, consumerWords):
			in.Consumer = c
		case in.EventID == nil && idType(c.Type) && like(name, eventIDWords):
			in.EventID = c
		}
	}
	if p := payloadColumns(t); len(p) > 0 {
		in.Payload = p[0]
	}
	if in.Consumer == nil || in.EventID == nil || in.Payload == nil {
		return nil
	}
	return in
}

// ReadModel is a table that looks like a read model of amounts: the
// columns a projection query returns, where the table has them.
type ReadModel struct {
	Table                             *Table
	Consumer, Currency, Amount, Count *Column
}

// ReadModels are the consumer tables other than the inboxes with an
// amount-like numeric column, the most complete first.
func ReadModels(cat *Catalog, inboxes []*Inbox) []*ReadModel {
	var out []*ReadModel
	for _, t := range cat.Tables {
		if slices.ContainsFunc(inboxes, func(in *Inbox) bool { return in.Table == t }) {
			continue
		}
		m := &ReadModel{Table: t}
		for _, c := range t.Columns {
			switch {
			case m.Consumer == nil && textType(c.Type) && like(c.Name, consumerWords):
				m.Consumer = c
			case m.Currency == nil && textType(c.Type) && like(c.Name, currencyWords):
				m.Currency = c
			case m.Amount == nil && numericType(c.Type) && like(c.Name, amountWords):
				m.Amount = c
			case m.Count == nil && numericType(c.Type) && like(c.Name, countWords):
				m.Count = c
			}
		}
		if m.Amount != nil {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b *ReadModel) int { return b.complete() - a.complete() })
	return out
}

func (m *ReadModel) complete() int {
	n := 0
	for _, c := range []*Column{m.Consumer, m.Currency, m.Amount, m.Count} {
		if c != nil {
			n++
		}
	}
	return n
}

var plainIdent = lazy.Regexp(`^[a-z_][a-z0-9_]*$`)

// reserved are the key words PostgreSQL reserves (as column names they
// need quotes).
var reserved = strings.Fields(`all analyse analyze and any array as asc asymmetric both case cast check collate column
constraint create current_catalog current_date current_role current_time current_timestamp current_user default
deferrable desc distinct do else end except false fetch for foreign from grant group having in initially intersect
into lateral leading limit localtime localtimestamp not null offset on only or order placing primary references
returning select session_user some symmetric system_user table then to trailing true union unique user using
variadic when where window with`)

// Ident is name as SQL writes it: bare when it can be, else quoted.
func Ident(name string) string {
	if plainIdent().MatchString(name) && !slices.Contains(reserved, name) {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
