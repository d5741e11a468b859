package scaffold

import (
	"fmt"
	"github.com/outboxdrill/runner/proxy/fault"
	"slices"
	"strings"
)

// readModel finds the read model the probe moved: a table other than the
// inbox that gained (or changed to) a row holding the probe's amount, and
// writes the projection query from that row's columns.
func (x *inference) readModel() bool {
	amount := fmt.Sprint(probeAmount)
	for _, t := range x.f.cats[1].Tables {
		if t == x.inbox {
			continue
		}
		for _, row := range gained(x.f.before[1][t.Ref()], x.obs.after[1][t.Ref()]) {
			amounts := numeric(columnsHolding(t, row, amount))
			if len(amounts) > 0 {
				x.projection(t, row, amounts)
				return true
			}
		}
	}
	x.notes = append(x.notes, fmt.Sprintf("no projection: no table but the inbox gained the probe's amount (%d) (a read model the consumer keeps in the inbox's transaction: projection: \"SELECT consumer, currency, amount, events FROM …\")", probeAmount))
	return true
}

// projection writes the projection query from t's row for the probe.
func (x *inference) projection(t *Table, row map[string]any, amounts []*Column) {
	cons := columnsHolding(t, row, x.obs.told["consumer"])
	curs := columnsHolding(t, row, probeCurrency)
	counts := slices.DeleteFunc(numeric(columnsHolding(t, row, "1")), func(c *Column) bool { return slices.Contains(amounts, c) })
	if len(counts) == 0 {
		x.notes = append(x.notes, fmt.Sprintf("no projection: %s gained the probe's amount in %s but no column counted the event (1): the runner's projection is consumer id, currency, amount, events", t.Ref(), amounts[0].Name))
		return
	}
	cols := []string{pick(cons, "'"+x.obs.told["consumer"]+"'::text"), pick(curs, "'"+probeCurrency+"'::text"), Ident(amounts[0].Name), Ident(counts[0].Name)}
	k := &Key{Name: "projection", Value: yq(fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), t.Ref()))}
	same := slices.Contains(x.inboxTx, t.Name)
	where := "in the consumer's commit that wrote the inbox"
	if !same {
		where = "in another transaction than the inbox row"
		x.notes = append(x.notes, fmt.Sprintf("the consumer writes %s and %s in different transactions: a crash between them leaves the event applied without its effect (drill it: %s do=kill)", x.plan.InboxTable, t.Ref(),
			fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: t.Name}}.On()))
	}
	k.Comments = append(k.Comments, fmt.Sprintf("seen: %s gained %s %s", t.Ref(), rowText(t, row, cons, curs, amounts[:1], counts[:1]), where))
	if len(cons) == 0 || len(curs) == 0 {
		k.Comments = append(k.Comments, "check: "+t.Ref()+" has no column holding the consumer id or the currency: the query gives the probe's")
	}
	for _, c := range counts[1:] {
		alt := slices.Clone(cols)
		alt[3] = Ident(c.Name)
		k.Alternatives = append(k.Alternatives, yq(fmt.Sprintf("SELECT %s FROM %s", strings.Join(alt, ", "), t.Ref()))+"   (that column held 1 too)")
	}
	x.plan.Projection = true
	x.plan.set(k)
}

func numeric(cols []*Column) []*Column {
	return slices.DeleteFunc(cols, func(c *Column) bool { return !numericType(c.Type) })
}

func pick(cols []*Column, otherwise string) string {
	if len(cols) == 0 {
		return otherwise
	}
	return Ident(cols[0].Name)
}

// rowText shows the row's mapped values: (accounting, USD, 4217, 1).
func rowText(t *Table, row map[string]any, groups ...[]*Column) string {
	var vals []string
	for _, g := range groups {
		if len(g) > 0 {
			vals = append(vals, g[0].Name+"="+show(row[g[0].Name]))
		}
	}
	return "(" + strings.Join(vals, ", ") + ")"
}
