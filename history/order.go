package history

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/state"
)

// Per-aggregate order is judged from the final state alone, the same on
// every broker: the consumer's inbox rows in its apply order (the column
// inbox.applied_order names), each traced to its committed event, whose
// payload gives the aggregate and the version (event.aggregate,
// event.version). What the broker did in between does not enter: a
// consumer that parks an early arrival and applies it later, in order,
// leaves an inbox in order; one that dead-letters it leaves no row for it.

// loadOrder reads the inbox in apply order where m says how, or says why
// per-aggregate order cannot be judged on this run.
func (st *State) loadOrder(ctx context.Context, db state.DB, m state.Map) error {
	if len(m.AggregatePath) == 0 || len(m.VersionPath) == 0 {
		why := "the system file maps no event.aggregate and event.version (the paths in the payload to the aggregate key and its version; by default the event.payload fields that are exactly \"${aggregate}\" and \"${version}\"), so no event has an aggregate to be ordered in"
		st.Inapplicable[OutOfOrder], st.Inapplicable[Gap] = why, why
		return nil
	}
	st.OrderOf = m.OrderOf
	if m.Team {
		st.OrderPaths = [2]string{"event.aggregate (" + strings.Join(m.AggregatePath, ".") + ")", "event.version (" + strings.Join(m.VersionPath, ".") + ")"}
	}
	if m.AppliedOrder == "" {
		st.Inapplicable[OutOfOrder] = "the system file maps no inbox.applied_order (a column of the inbox whose order is the consumer's apply order: a serial, bigserial or identity, or a clock_timestamp() default), so the order the consumer applied its events in cannot be read; the consumer database proxy sees which tables a commit wrote, not which inbox rows, so it cannot tell it either"
		return nil
	}
	rows, err := state.AppliedRowsOf(ctx, db, m)
	if err != nil {
		return err
	}
	st.Applied = map[string][]state.AppliedRow{}
	for _, r := range rows {
		st.Applied[r.Consumer] = append(st.Applied[r.Consumer], r)
	}
	return nil
}

// orderPath is OrderPaths[i], or the reference payload's field.
func (st State) orderPath(i int) string {
	if st.OrderPaths[i] == "" {
		return [2]string{"the payload's aggregate field", "the payload's version field"}[i]
	}
	return st.OrderPaths[i]
}

// versioned is one applied event of an aggregate, as the witness names it.
type versioned struct {
	event   string
	version int64
	rank    int64
}

func (v versioned) String() string { return fmt.Sprintf("version %d (%s)", v.version, v.event) }

func joinVersions(vs []versioned) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, ", ")
}

// versionOf is an event's place in its aggregate, from its committed
// payload.
type versionOf struct {
	aggregate string
	version   int64
}

// outboxOrder reads the aggregate and the version of every committed event
// that has them, once for all consumers. An aggregate one of whose events
// carries no whole-number version cannot be ordered: it is left out, not
// judged, with why; where no event is left, neither invariant is judged
// (nil): a run that gave nothing to order never shows them as held.
func outboxOrder(st State) map[string]versionOf {
	if st.OrderOf == nil {
		return nil
	}
	out := map[string]versionOf{}
	unversioned := map[string][]string{} // aggregate → its events without a version
	for ev, payload := range st.Outbox {
		agg, version, ok := st.OrderOf(payload)
		switch {
		case ok:
			out[ev] = versionOf{agg, version}
		case agg != "":
			unversioned[agg] = append(unversioned[agg], ev)
		}
	}
	for ev, o := range out {
		if unversioned[o.aggregate] != nil {
			delete(out, ev)
		}
	}
	for _, agg := range sortedKeys(unversioned) {
		evs := unversioned[agg]
		slices.Sort(evs)
		why := fmt.Sprintf("event %s of aggregate %s carries no whole-number version at %s, so the versions of %s cannot be ordered", evs[0], agg, st.orderPath(1), agg)
		if len(evs) > 1 {
			why = fmt.Sprintf("%d events of aggregate %s (%s first) carry no whole-number version at %s, so the versions of %s cannot be ordered", len(evs), agg, evs[0], st.orderPath(1), agg)
		}
		st.NotJudged[fmt.Sprintf("%s (aggregate %s)", OutOfOrder, agg)], st.NotJudged[fmt.Sprintf("%s (aggregate %s)", Gap, agg)] = why, why
	}
	if len(out) == 0 {
		why := fmt.Sprintf("no committed event of the run carries an aggregate at %s and a whole-number version at %s", st.orderPath(0), st.orderPath(1))
		if st.OrderPaths[0] == "" { // the reference pipeline
			why = "no committed event of the run belongs to an aggregate (produce: {aggregate: acct-1} gives its event the aggregate's next version)"
		}
		for _, inv := range []string{OutOfOrder, Gap} {
			if _, never := st.Inapplicable[inv]; !never {
				st.NotJudged[inv] = why
			}
		}
		return nil
	}
	return out
}

// orderVerdicts judges out_of_order and gap for consumer c, once cs.Inbox
// names the events c applied; ord is outboxOrder's (nil: nothing to judge,
// and outboxOrder said so).
func orderVerdicts(c string, cs *Consumer, st State, ops []Op, ord map[string]versionOf) []Violation {
	if st.OrderOf == nil {
		if _, said := st.Inapplicable[Gap]; !said {
			why := "the aggregate and the version of an event were not read"
			st.Inapplicable[OutOfOrder], st.Inapplicable[Gap] = why, why
		}
		return nil
	}
	if ord == nil {
		return nil
	}
	if purged := slices.ContainsFunc(ops, func(op Op) bool { return op.Kind == Purge && op.Consumer == c }); purged {
		why := fmt.Sprintf("the inbox of %s was purged: its final rows no longer say every event it applied", c)
		st.NotJudged[fmt.Sprintf("%s (consumer %s)", OutOfOrder, c)], st.NotJudged[fmt.Sprintf("%s (consumer %s)", Gap, c)] = why, why
		return nil
	}
	var vs []Violation
	if st.Applied != nil {
		vs = append(vs, outOfOrder(c, st, ops, ord)...)
	} else if _, said := st.Inapplicable[OutOfOrder]; !said {
		st.Inapplicable[OutOfOrder] = "the consumer's apply order was not read"
	}
	return append(vs, gaps(c, cs, st, ops, ord)...)
}

// appliedByAggregate groups c's inbox rows, in apply order, by the
// aggregate of the committed event each records (first row per event).
func appliedByAggregate(c string, st State, ord map[string]versionOf) (map[string][]versioned, []string) {
	by := map[string][]versioned{}
	var aggs []string
	seen := map[string]bool{}
	for _, row := range st.Applied[c] {
		ev := eventOfRow(st, row)
		o, ordered := ord[ev] // not committed: phantom says it
		if !ordered || seen[ev] {
			continue // a second row: double_applied says it
		}
		seen[ev] = true
		if len(by[o.aggregate]) == 0 {
			aggs = append(aggs, o.aggregate)
		}
		by[o.aggregate] = append(by[o.aggregate], versioned{ev, o.version, row.Rank})
	}
	slices.Sort(aggs)
	return by, aggs
}

// eventOfRow is the business event an inbox row records: its key on the
// reference pipeline, traced on a team's system (Team.resolve).
func eventOfRow(st State, row state.AppliedRow) string {
	if st.Team == nil {
		return row.Key
	}
	return st.Team.resolve(st, state.InboxRow{Consumer: row.Consumer, Key: row.Key, Payload: row.Payload}).event
}

// outOfOrder: per aggregate, a version applied after a later one (see
// inversions). Rows whose apply order ties cannot be ordered among
// themselves: an aggregate with no inversion but such a tie is not judged.
func outOfOrder(c string, st State, ops []Op, ord map[string]versionOf) []Violation {
	by, aggs := appliedByAggregate(c, st, ord)
	var vs []Violation
	for _, agg := range aggs {
		applied := by[agg]
		inversions, tied := inversions(applied)
		if len(inversions) == 0 {
			if tied != "" {
				st.NotJudged[fmt.Sprintf("%s (aggregate %s of %s)", OutOfOrder, agg, c)] = tied + ": their apply order cannot be told (a serial column, or a clock_timestamp() default, tells it; now() is the transaction's start, the same for every row it writes)"
			}
			continue
		}
		events := map[string]bool{}
		for _, v := range applied {
			events[v.event] = true
		}
		shown := strings.Join(inversions[:min(len(inversions), 3)], "; ")
		if len(inversions) > 3 {
			shown += fmt.Sprintf("; … (%d versions applied after a later one)", len(inversions))
		}
		vs = append(vs, Violation{OutOfOrder, c, applied[len(applied)-1].event, fmt.Sprintf("aggregate %s: applied in the order %s: %s",
			agg, joinVersions(applied), shown), ofEvents(relevant(ops, c), events)})
	}
	return vs
}

// inversions names each row of applied (in apply order, ranks ascending)
// against the highest version among the rows of a strictly lower rank,
// where that is higher: one pass. Rows of one rank are in no known order
// among themselves, so none is compared with another of its rank; tied
// names the first such rank holding different versions ("" if none).
func inversions(applied []versioned) (inversions []string, tied string) {
	var before versioned // the highest version of the lower ranks, once lower
	lower := false
	for i, j := 0, 0; i < len(applied); i = j {
		for j = i; j < len(applied) && applied[j].rank == applied[i].rank; j++ { // j: past applied[i]'s rank
		}
		rank := applied[i:j]
		if tied == "" && slices.ContainsFunc(rank, func(v versioned) bool { return v.version != rank[0].version }) {
			tied = joinAnd(rank) + " hold the same inbox.applied_order value"
		}
		for _, v := range rank {
			if lower && before.version > v.version {
				inversions = append(inversions, fmt.Sprintf("%s before %s", before, v))
			}
		}
		for _, v := range rank {
			if !lower || v.version > before.version {
				before, lower = v, true
			}
		}
	}
	return inversions, tied
}

// joinAnd is "a and b", "a, b and c".
func joinAnd(vs []versioned) string {
	return joinVersions(vs[:len(vs)-1]) + " and " + vs[len(vs)-1].String()
}

// gaps: per aggregate, the versions c applied while an earlier version
// the producer committed is not applied at the end (dead-lettered or
// not): one violation per aggregate, naming both.
func gaps(c string, cs *Consumer, st State, ops []Op, ord map[string]versionOf) []Violation {
	committed := map[string][]versioned{}
	for ev, o := range ord {
		committed[o.aggregate] = append(committed[o.aggregate], versioned{event: ev, version: o.version})
	}
	var vs []Violation
	for _, agg := range sortedKeys(committed) {
		evs := committed[agg]
		slices.SortFunc(evs, func(a, b versioned) int {
			return cmp.Or(cmp.Compare(a.version, b.version), strings.Compare(a.event, b.event))
		})
		var missing, over []versioned
		for _, v := range evs {
			_, applied := cs.Inbox[v.event]
			switch {
			case !applied:
				missing = append(missing, v)
			case len(missing) > 0:
				over = append(over, v) // applied, over a version missing below it
			}
		}
		if len(over) == 0 {
			continue
		}
		events := map[string]bool{}
		var never []string
		for _, m := range missing {
			if m.version < over[len(over)-1].version {
				events[m.event] = true
				never = append(never, m.String()+deadLettered(st, m.event))
			}
		}
		for _, v := range over {
			events[v.event] = true
		}
		inApplyOrder(over, st, st.Applied[c])
		vs = append(vs, Violation{Gap, c, over[0].event, fmt.Sprintf("aggregate %s: %s applied, but %s, an earlier version, never was",
			agg, joinVersions(over), strings.Join(never, ", ")), ofEvents(relevant(ops, c), events)})
	}
	return vs
}

// inApplyOrder sorts vs as rows (the consumer's inbox in apply order, if
// read) has them; stable, so version order stands where it was not read.
func inApplyOrder(vs []versioned, st State, rows []state.AppliedRow) {
	rank := map[string]int64{}
	for _, r := range rows {
		if ev := eventOfRow(st, r); rank[ev] == 0 {
			rank[ev] = r.Rank
		}
	}
	slices.SortStableFunc(vs, func(a, b versioned) int { return cmp.Compare(rank[a.event], rank[b.event]) })
}

func deadLettered(st State, ev string) string {
	if st.DeadLetters[ev] {
		return " (dead-lettered)"
	}
	return ""
}

// ofEvents keeps the ops about the given events, in order.
func ofEvents(ops []Op, events map[string]bool) []Op {
	var out []Op
	for _, op := range ops {
		if events[op.EventID] {
			out = append(out, op)
		}
	}
	return out
}
