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
// that has them, once for all consumers.
func outboxOrder(st State) map[string]versionOf {
	if st.OrderOf == nil {
		return nil
	}
	out := map[string]versionOf{}
	for ev, payload := range st.Outbox {
		if agg, version, ok := st.OrderOf(payload); ok {
			out[ev] = versionOf{agg, version}
		}
	}
	return out
}

// orderVerdicts judges out_of_order and gap for consumer c, once cs.Inbox
// names the events c applied; ord is outboxOrder's.
func orderVerdicts(c string, cs *Consumer, st State, ops []Op, ord map[string]versionOf) []Violation {
	if st.OrderOf == nil {
		if _, said := st.Inapplicable[Gap]; !said {
			why := "the aggregate and the version of an event were not read"
			st.Inapplicable[OutOfOrder], st.Inapplicable[Gap] = why, why
		}
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

// outOfOrder: per aggregate, a version applied after a later one (each
// named against the highest version applied before it: one pass). Rows
// whose apply order ties cannot be ordered: an aggregate with no
// inversion but a tie is not judged.
func outOfOrder(c string, st State, ops []Op, ord map[string]versionOf) []Violation {
	by, aggs := appliedByAggregate(c, st, ord)
	var vs []Violation
	for _, agg := range aggs {
		applied := by[agg]
		var inversions []string
		events := map[string]bool{}
		tied, highest := "", applied[0]
		for i, v := range applied {
			events[v.event] = true
			switch {
			case i > 0 && applied[i-1].rank == v.rank:
				tied = fmt.Sprintf("%s and %s hold the same inbox.applied_order value", applied[i-1], v)
			case highest.version > v.version:
				inversions = append(inversions, fmt.Sprintf("%s before %s", highest, v))
			}
			if v.version > highest.version {
				highest = v
			}
		}
		if len(inversions) == 0 {
			if tied != "" {
				st.NotJudged[fmt.Sprintf("%s (aggregate %s of %s)", OutOfOrder, agg, c)] = tied + ": their apply order cannot be told (a serial column, or a clock_timestamp() default, tells it; now() is the transaction's start, the same for every row it writes)"
			}
			continue
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
		vs = append(vs, Violation{Gap, c, over[0].event, fmt.Sprintf("aggregate %s: %s applied, but %s, committed before, never was",
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
