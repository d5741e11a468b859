package scaffold

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// outbox reads how the relay marked the probe's row: the columns that
// went from unpublished to published, the catalog's markers first.
func (x *inference) outbox() bool {
	f := x.f
	t := f.outbox.Table
	after := rowWith(x.obs.after[0][t.Ref()], f.eventID.Name, x.id)
	if after == nil {
		return x.problemf("the relay published the probe, then its row left %s: the runner needs a published row kept and marked (outbox.unpublished is the condition true for rows not yet published)", t.Ref())
	}
	var marks []Marker
	var how []string
	for _, c := range changed(t, f.inserted, after) {
		if m, ok := markerOf(c, f.inserted[c.Name], after[c.Name]); ok {
			marks = append(marks, m)
			how = append(how, fmt.Sprintf("%s went %s → %s", c.Name, show(f.inserted[c.Name]), show(after[c.Name])))
		}
	}
	slices.SortStableFunc(marks, func(a, b Marker) int { return candidate(f, b) - candidate(f, a) })
	if len(marks) == 0 {
		return x.problemf("the relay published the probe but changed none of its row's columns in %s as a mark (a timestamp set, a boolean flipped, a status changed): write outbox.unpublished yourself, the SQL condition true for rows your relay has yet to publish", t.Ref())
	}
	k := &Key{Name: "outbox", Value: flow("table", t.Ref(), "event_id", f.eventID.Name, "payload", f.payload.Name, "unpublished", marks[0].Unpublished)}
	k.Comments = append(k.Comments, "seen: "+x.markedWhen(t.Name)+"; the probe row's "+strings.Join(how, ", "))
	for _, m := range marks[1:] {
		k.Alternatives = append(k.Alternatives, flow("table", t.Ref(), "event_id", f.eventID.Name, "payload", f.payload.Name, "unpublished", m.Unpublished)+"   (that column changed too)")
	}
	for _, o := range f.outboxes {
		if o != f.outbox {
			k.Alternatives = append(k.Alternatives, flow("table", o.Table.Ref(), "event_id", o.EventIDs[0].Name, "payload", o.Payloads[0].Name, "unpublished", o.Markers[0].Unpublished)+
				fmt.Sprintf("   (shaped like an outbox too; the probe went into %s, which the relay published)", t.Ref()))
		}
	}
	x.plan.set(x.produceKey())
	x.plan.set(k)
	return true
}

// markerOf is column c as an unpublished marker, from its value when the
// probe was inserted (before) and once the relay published it (after).
func markerOf(c *Column, before, after any) (Marker, bool) {
	q := Ident(c.Name)
	b, bnull := text(before)
	_, anull := text(after)
	switch {
	case bnull && !anull:
		return Marker{c, q + " IS NULL"}, true
	case c.Type == "boolean" && b == "false":
		return Marker{c, "NOT " + q}, true
	case c.Type == "boolean" && b == "true":
		return Marker{c, q}, true
	case textType(c.Type) && !bnull:
		return Marker{c, q + " = '" + strings.ReplaceAll(b, "'", "''") + "'"}, true
	}
	return Marker{}, false // a timestamp that moved (updated_at), a counter: not a mark
}

// candidate ranks a marker: one of the catalog's markers first.
func candidate(f *found, m Marker) int {
	if slices.ContainsFunc(f.outbox.Markers, func(c Marker) bool { return c.Column == m.Column }) {
		return 1
	}
	return 0
}

// markedWhen says when the relay's commit that wrote table came, against
// its publish of the probe; marking first is a note of its own.
func (x *inference) markedWhen(table string) string {
	first := x.crossing("relay", "producer_db", time.Time{}, writes(table))
	op := "publish (" + x.pub.Op + ", to ${destination})"
	switch {
	case first == nil:
		return "the relay published it (" + op + ")"
	case first.At.Before(x.pub.At):
		x.notes = append(x.notes, fmt.Sprintf("the relay committed its mark on %s before its %s: a crash between the two loses the event (drill it: start the relay with fault broker.request(publish) do=kill)", table, x.pub.Op))
		return fmt.Sprintf("the relay's commit that wrote %s came %s BEFORE its %s", table, since(first.At, x.pub.At), op)
	}
	return fmt.Sprintf("the relay's commit that wrote %s came %s after its %s", table, since(x.pub.At, first.At), op)
}

// produceKey is the produce statement, with what init made up.
func (x *inference) produceKey() *Key {
	f := x.f
	k := &Key{Name: "produce", Value: yq(f.produce.SQL)}
	k.Comments = append(k.Comments, fmt.Sprintf("built from %s's NOT NULL columns without a default: ${event} and ${payload} (the event's JSON) are bound parameters", f.outbox.Table.Ref()))
	if len(f.produce.Literals) > 0 {
		k.Comments = append(k.Comments, "check: "+strings.Join(f.produce.Literals, ", ")+" (made up to fit the type; write what your producer writes)")
	}
	return k
}
