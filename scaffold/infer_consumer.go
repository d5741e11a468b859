package scaffold

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/internal/lazy"
)

// inboxRow finds the row the consumer wrote for the probe: a table that
// gained a row holding the probe's id and the consumer id, the catalog's
// inboxes first, and maps its columns by their values.
func (x *inference) inboxRow() bool {
	consumer := x.obs.told["consumer"]
	for _, t := range x.consumerTables() {
		for _, row := range gained(x.f.before[1][t.Ref()], x.obs.after[1][t.Ref()]) {
			ids, cons := columnsHolding(t, row, x.id), columnsHolding(t, row, consumer)
			if len(ids) == 0 || len(cons) == 0 {
				continue
			}
			return x.mapInbox(t, row, prefer(ids, x.catalogInbox(t, "event")), prefer(cons, x.catalogInbox(t, "consumer")))
		}
	}
	return x.problemf("the consumer was handed the probe but wrote no row holding both its id %s and the consumer id %q (${consumer}) in %s: an inbox row keyed by consumer and event id is what the runner reads (inbox:); %s",
		show(x.id), consumer, strings.Join(tableNames(x.f.cats[1]), ", "), x.said("consumer"))
}

// mapInbox writes the inbox key from the probe's row in t.
func (x *inference) mapInbox(t *Table, row map[string]any, ids, cons []*Column) bool {
	var pays []*Column
	for _, c := range t.Columns {
		if payloadType(c.Type) && sameJSON(row[c.Name], x.f.payloadJSON) {
			pays = append(pays, c)
		}
	}
	if len(pays) == 0 {
		return x.problemf("inbox: %s's row for the probe holds no column with its payload (the event's JSON): the runner compares the committed payload with the applied one (inbox.payload); add a json or jsonb column the consumer fills with it", t.Ref())
	}
	x.inbox, x.plan.InboxTable = t, t.Ref()
	if c := x.crossing("consumer", "consumer_db", x.del.At, writes(t.Name)); c != nil {
		x.inboxAt, x.inboxTx = c.At, c.Tables
	}
	k := &Key{Name: "inbox", Value: flow("table", t.Ref(), "consumer", cons[0].Name, "event_id", ids[0].Name, "payload", pays[0].Name)}
	k.Comments = append(k.Comments, fmt.Sprintf("seen: %s; its row: %s = %s (${consumer}), %s = the probe's id, %s = its payload",
		x.commitSaid(t.Ref()), cons[0].Name, show(row[cons[0].Name]), ids[0].Name, pays[0].Name))
	if !t.Unique(cons[0].Name, ids[0].Name) {
		x.notes = append(x.notes, fmt.Sprintf("%s has no unique index over (%s, %s): nothing in the database stops a second row for one event", t.Ref(), cons[0].Name, ids[0].Name))
	}
	for _, alt := range alternatives(t, cons, ids, pays) {
		k.Alternatives = append(k.Alternatives, alt+"   (those columns held the same values)")
	}
	x.plan.set(k)
	x.amountPath(row[pays[0].Name])
	svc := x.service("consumer")
	svc.Comments = append(svc.Comments, "seen: it "+x.acked())
	return true
}

// commitSaid says which commit wrote the inbox row, and what else it wrote.
func (x *inference) commitSaid(table string) string {
	if x.inboxTx == nil {
		return "the consumer wrote " + table
	}
	if len(x.inboxTx) == 1 {
		return fmt.Sprintf("the consumer's commit %s after the delivery wrote %s", since(x.del.At, x.inboxAt), table)
	}
	return fmt.Sprintf("the consumer's commit %s after the delivery wrote %s in one transaction", since(x.del.At, x.inboxAt), strings.Join(x.inboxTx, " and "))
}

// alternatives are the other inbox mappings the row's values allow.
func alternatives(t *Table, cons, ids, pays []*Column) []string {
	var out []string
	for _, c := range cons {
		for _, i := range ids {
			for _, p := range pays {
				if (c != cons[0] || i != ids[0] || p != pays[0]) && c != i {
					out = append(out, flow("table", t.Ref(), "consumer", c.Name, "event_id", i.Name, "payload", p.Name))
				}
			}
		}
	}
	return out
}

// amountPath writes event: when the amount is elsewhere in the applied
// payload than at amount (the runner's own JSON's place).
func (x *inference) amountPath(payload any) {
	v, _ := decodeJSON(payload)
	p := pathTo(v, fmt.Sprint(probeAmount))
	if p == "" || p == "amount" {
		return
	}
	x.plan.set(&Key{Name: "event", Value: "{amount: " + yq(p) + "}",
		Comments: []string{fmt.Sprintf("seen: the inbox's payload holds the probe's amount (%d) at %s", probeAmount, p)}})
}

// consumerTables are the consumer's tables, the catalog's inboxes first.
func (x *inference) consumerTables() []*Table {
	var out []*Table
	for _, in := range x.f.inboxes {
		out = append(out, in.Table)
	}
	for _, t := range x.f.cats[1].Tables {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// catalogInbox is the column the catalog took for t's consumer or event
// id, nil when t was no inbox candidate.
func (x *inference) catalogInbox(t *Table, what string) *Column {
	for _, in := range x.f.inboxes {
		if in.Table == t {
			if what == "consumer" {
				return in.Consumer
			}
			return in.EventID
		}
	}
	return nil
}

// prefer puts c first in cols when it is there.
func prefer(cols []*Column, c *Column) []*Column {
	if i := slices.Index(cols, c); i > 0 {
		cols = append([]*Column{c}, slices.Delete(slices.Clone(cols), i, i+1)...)
	}
	return cols
}

func tableNames(cat *Catalog) []string {
	var out []string
	for _, t := range cat.Tables {
		out = append(out, t.Ref())
	}
	return out
}

// readyWord is what a service's ready line says.
var readyWord = lazy.Regexp(`(?i)\bready\b`)

// ready writes each service's ready: the word "ready" in a line of its
// output, as the line has it.
func (x *inference) ready() {
	for _, s := range x.plan.Services {
		for _, o := range x.obs.res.Services {
			if o.Service != s.Name {
				continue
			}
			for _, line := range strings.Split(o.Output, "\n") {
				if w := readyWord().FindString(line); w != "" {
					s.Ready = w
					s.Comments = append(s.Comments, fmt.Sprintf("seen: its output said %q (ready: a start waits for that line)", strings.TrimSpace(cut(line))))
					break
				}
			}
			if s.Ready == "" {
				s.Comments = append(s.Comments, "no line of its output said ready: a start counts it ready once the process runs; add ready: {log: TEXT} naming the line it prints once it is")
			}
			break
		}
	}
}
