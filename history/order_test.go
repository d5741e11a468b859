package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/state"
)

// versionPay is the reference payload of event e<v>: version v of
// aggregate acct-1.
func versionPay(v int) string {
	return fmt.Sprintf(`{"event_id":"e%d","amount":10,"currency":"USD","aggregate":"acct-1","version":%d}`, v, v)
}

// ordered is the history of versions 1..n of acct-1, committed, published
// and delivered; the consumer c applied those of applied, in that order
// (its inbox in apply order), and left the others.
func ordered(n int, applied ...int) ([]Op, State) {
	st := State{Outbox: map[string]string{}, Unpublished: map[string]bool{}, Stream: map[string]int{}, HasStream: true,
		DeadLetters: map[string]bool{}, NotJudged: map[string]string{}, Inapplicable: map[string]string{},
		Consumers:   map[string]*Consumer{"c": {Inbox: map[string]string{}, InboxSums: map[string]Sum{}}},
		Projections: map[string]map[string]Sum{"c": {}}, Applied: map[string][]state.AppliedRow{}, OrderOf: state.Reference.OrderOf}
	var ops []Op
	for v := 1; v <= n; v++ {
		ev := fmt.Sprintf("e%d", v)
		st.Outbox[ev], st.Stream[ev] = versionPay(v), 1
		ops = append(ops, Op{Step: "produce", StepN: v, Kind: Commit, EventID: ev, Payload: versionPay(v)},
			Op{Step: "relay", StepN: n + 1, Kind: Publish, EventID: ev, EntryID: fmt.Sprintf("%d-0", v), Payload: versionPay(v)})
	}
	for i, v := range applied {
		ev := fmt.Sprintf("e%d", v)
		ops = append(ops, Op{Step: "consume", StepN: n + 2, Kind: Applied, EventID: ev, EntryID: fmt.Sprintf("%d-0", v), Consumer: "c", Model: "c", Payload: versionPay(v), Acked: true})
		st.Consumers["c"].Inbox[ev] = versionPay(v)
		st.Applied["c"] = append(st.Applied["c"], state.AppliedRow{Consumer: "c", Key: ev, Payload: versionPay(v), Rank: int64(i + 1)})
	}
	sum := Sum{Amount: int64(10 * len(applied)), Events: int64(len(applied))}
	if len(applied) > 0 {
		st.Consumers["c"].InboxSums["USD"], st.Projections["c"]["USD"] = sum, sum
	}
	return ops, st
}

// orderViolations are the out_of_order and gap violations of a check.
func orderViolations(ops []Op, st State) []string {
	var out []string
	for _, v := range check(ops, st) {
		if v.Invariant == OutOfOrder || v.Invariant == Gap {
			out = append(out, v.String())
		}
	}
	return out
}

func TestOrderInOrderPasses(t *testing.T) {
	ops, st := ordered(3, 1, 2, 3)
	if vs := check(ops, st); len(vs) != 0 {
		t.Fatalf("versions applied 1, 2, 3: %v", vs)
	}
}

// Each wrong order is named with the consumer, the aggregate, the versions
// and the event ids in apply order.
func TestOrderViolations(t *testing.T) {
	cases := []struct {
		name    string
		n       int
		applied []int
		amend   func(st *State)
		want    []string
	}{
		{"a later version applied before an earlier one", 3, []int{3, 2, 1}, nil,
			[]string{"out_of_order: consumer c, event e1: aggregate acct-1: applied in the order version 3 (e3), version 2 (e2), version 1 (e1): version 3 (e3) before version 2 (e2); version 3 (e3) before version 1 (e1)"}},
		{"a version applied while an earlier one never was", 3, []int{1, 3}, nil,
			[]string{"gap: consumer c, event e3: aggregate acct-1: version 3 (e3) applied, but version 2 (e2), an earlier version, never was"}},
		{"a dead-lettered version counts as never applied", 3, []int{1, 3}, func(st *State) { st.DeadLetters["e2"] = true },
			[]string{"gap: consumer c, event e3: aggregate acct-1: version 3 (e3) applied, but version 2 (e2) (dead-lettered), an earlier version, never was"}},
		{"both: version 3 first, version 1 never", 3, []int{3, 2}, nil,
			[]string{"out_of_order: consumer c, event e2: aggregate acct-1: applied in the order version 3 (e3), version 2 (e2): version 3 (e3) before version 2 (e2)",
				"gap: consumer c, event e3: aggregate acct-1: version 3 (e3), version 2 (e2) applied, but version 1 (e1), an earlier version, never was"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops, st := ordered(c.n, c.applied...)
			if c.amend != nil {
				c.amend(&st)
			}
			got := orderViolations(ops, st)
			for _, w := range c.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
					t.Errorf("want %q\n got %q", w, got)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("got %d order violations, want %d: %q", len(got), len(c.want), got)
			}
		})
	}
}

// A consumer that parks an early version (delivered first, held back
// unapplied, then applied once its predecessors are in) ends with its
// inbox rows in apply order v1, v2, v3: it passes. Its twin, handed the
// same deliveries, applies v3 before v2 once v1 is in: out_of_order, from
// the rows alone. One that rejects v3 (dead-letters it) passes too: it
// never applied anything over a missing version.
func TestOrderParkedOrRejectedPasses(t *testing.T) {
	parked := func(applied ...int) ([]Op, State) {
		ops, st := ordered(3, applied...)
		held := Op{Step: "consume", StepN: 4, Kind: "deferred", EventID: "e3", EntryID: "3-0", Consumer: "c", Model: "c", Payload: versionPay(3)}
		return slices.Insert(ops, 6, held), st // delivered first, before 1 and 2
	}
	if vs := orderViolations(parked(1, 2, 3)); len(vs) != 0 {
		t.Errorf("v3 parked, then applied after v1 and v2: %v", vs)
	}
	want := "out_of_order: consumer c, event e2: aggregate acct-1: applied in the order version 1 (e1), version 3 (e3), version 2 (e2): version 3 (e3) before version 2 (e2)"
	if vs := orderViolations(parked(1, 3, 2)); len(vs) != 1 || !strings.HasPrefix(vs[0], want) {
		t.Errorf("v3 parked, then applied before v2: %q, want %q", vs, want)
	}
	ops, st := ordered(3, 1, 2)
	st.DeadLetters["e3"] = true
	if vs := orderViolations(ops, st); len(vs) != 0 {
		t.Errorf("version 3 rejected to the dead letters, 1 and 2 applied: %v", vs)
	}
}

// Rows whose apply order ties cannot be ordered: not judged, with why,
// never passed; a purged inbox no longer says what was applied.
func TestOrderNotJudged(t *testing.T) {
	ops, st := ordered(2, 2, 1)
	st.Applied["c"][1].Rank = 1
	if vs := orderViolations(ops, st); len(vs) != 0 {
		t.Errorf("tied rows: %v", vs)
	}
	if why := st.NotJudged["out_of_order (aggregate acct-1 of c)"]; !strings.Contains(why, "hold the same inbox.applied_order value") {
		t.Errorf("tied rows: not judged %v", st.NotJudged)
	}
	// A tie does not hide an inversion between rows that do not tie.
	ops, st = ordered(3, 3, 2, 1)
	st.Applied["c"][1].Rank, st.Applied["c"][2].Rank = 1, 2
	if vs := orderViolations(ops, st); len(vs) != 1 || !strings.Contains(vs[0], "version 3 (e3) before version 1 (e1)") || strings.Contains(vs[0], "before version 2") {
		t.Errorf("3 and 2 tied, then 1: %q", vs)
	}
	// Nor does a tie after a row of a lower rank: v2 (rank 1) was applied
	// strictly before v1 (rank 2), whatever the order of v3 and v1.
	ops, st = ordered(3, 2, 3, 1)
	st.Applied["c"][2].Rank = 2
	if vs := orderViolations(ops, st); len(vs) != 1 || !strings.Contains(vs[0], ": version 2 (e2) before version 1 (e1)") || strings.Contains(vs[0], "version 3 (e3) before") {
		t.Errorf("v2, then v3 and v1 tied: %q, not judged %v", vs, st.NotJudged)
	}
	ops, st = ordered(3, 1, 3)
	ops = append(ops, Op{Step: "purge", Kind: Purge, Consumer: "c"})
	if vs := orderViolations(ops, st); len(vs) != 0 || !strings.Contains(st.NotJudged["gap (consumer c)"], "was purged") {
		t.Errorf("purged inbox: %v, not judged %v", vs, st.NotJudged)
	}
}

// Where nothing maps the aggregate and the version, both invariants are
// inapplicable, naming what to map; where only the apply order is not
// mapped, out_of_order is, naming inbox.applied_order, and gap is judged.
func TestOrderInapplicableSaysWhatToMap(t *testing.T) {
	st := State{Inapplicable: map[string]string{}}
	if err := st.loadOrder(context.Background(), nil, state.Map{Team: true}); err != nil {
		t.Fatal(err)
	}
	for _, inv := range []string{OutOfOrder, Gap} {
		if !strings.Contains(st.Inapplicable[inv], "maps no event.aggregate and event.version") {
			t.Errorf("%s: inapplicable %q", inv, st.Inapplicable[inv])
		}
	}
	st = State{Inapplicable: map[string]string{}}
	m := state.Map{Team: true, AggregatePath: []string{"aggregate"}, VersionPath: []string{"version"}}
	if err := st.loadOrder(context.Background(), nil, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Inapplicable[OutOfOrder], "maps no inbox.applied_order") || st.Inapplicable[Gap] != "" || st.OrderOf == nil {
		t.Errorf("no applied_order: inapplicable %v", st.Inapplicable)
	}
	ops, full := ordered(3, 3, 1)
	full.Applied, full.OrderOf, full.Inapplicable = nil, st.OrderOf, st.Inapplicable
	got := orderViolations(ops, full)
	if len(got) != 1 || !strings.HasPrefix(got[0], "gap: consumer c, event e3") {
		t.Errorf("no applied_order: want only the gap judged, got %q", got)
	}
}

// A run that gave nothing to order never shows out_of_order or gap as
// held: where no committed event carries both an aggregate and a
// whole-number version (no produce named an aggregate, or the paths lead
// nowhere), neither is judged, naming where they were looked for, even
// over an inbox that would otherwise fail.
func TestOrderNothingToJudge(t *testing.T) {
	ops, st := ordered(3, 1, 3)
	for ev := range st.Outbox {
		st.Outbox[ev] = fmt.Sprintf(`{"event_id":%q,"amount":10,"currency":"USD"}`, ev)
	}
	if vs := orderViolations(ops, st); len(vs) != 0 {
		t.Errorf("no aggregate: %q", vs)
	}
	for _, inv := range []string{OutOfOrder, Gap} {
		if why := st.NotJudged[inv]; !strings.Contains(why, "no committed event of the run belongs to an aggregate") {
			t.Errorf("no aggregate: %s not judged %q", inv, why)
		}
	}
	// A team's mapping that names a field the payload lacks (acount).
	ops, st = ordered(3, 1, 3)
	m := state.Map{Team: true, AggregatePath: []string{"acount"}, VersionPath: []string{"version"}}
	st.OrderOf, st.OrderPaths = m.OrderOf, [2]string{"event.aggregate (acount)", "event.version (version)"}
	if vs := orderViolations(ops, st); len(vs) != 0 {
		t.Errorf("aggregate path acount: %q", vs)
	}
	want := "no committed event of the run carries an aggregate at event.aggregate (acount) and a whole-number version at event.version (version)"
	if st.NotJudged[Gap] != want || st.NotJudged[OutOfOrder] != want {
		t.Errorf("aggregate path acount: not judged %v, want %q", st.NotJudged, want)
	}
	// The invariant that cannot be judged on this kind of run stays so.
	_, st = ordered(1)
	st.Outbox["e1"] = `{"event_id":"e1"}`
	st.Inapplicable[OutOfOrder] = "no applied_order"
	outboxOrder(st)
	if _, said := st.NotJudged[OutOfOrder]; said || st.NotJudged[Gap] == "" {
		t.Errorf("no applied_order, nothing to order: not judged %v", st.NotJudged)
	}
}

// An aggregate one of whose committed events carries no whole-number
// version is not judged, naming the event; the other aggregates are.
func TestOrderUnversionedAggregateNotJudged(t *testing.T) {
	ops, st := ordered(3, 1, 3)
	st.Outbox["e9"] = `{"event_id":"e9","aggregate":"acct-2","version":1}`
	if vs := orderViolations(ops, st); len(vs) != 1 || !strings.HasPrefix(vs[0], "gap: consumer c, event e3: aggregate acct-1") {
		t.Fatalf("all versioned: want the gap of acct-1, got %q", vs)
	}
	ops, st = ordered(3, 1, 3)
	st.Outbox["e9"] = `{"event_id":"e9","aggregate":"acct-2","version":1}`
	st.Outbox["e2"] = `{"event_id":"e2","aggregate":"acct-1","version":"two"}`
	if vs := orderViolations(ops, st); len(vs) != 0 {
		t.Errorf("e2's version not a number: %q", vs)
	}
	want := "event e2 of aggregate acct-1 carries no whole-number version at the payload's version field, so the versions of acct-1 cannot be ordered"
	if st.NotJudged["gap (aggregate acct-1)"] != want || st.NotJudged["out_of_order (aggregate acct-1)"] != want {
		t.Errorf("e2's version not a number: not judged %v, want %q", st.NotJudged, want)
	}
	if _, whole := st.NotJudged[Gap]; whole {
		t.Errorf("acct-2 is ordered: gap not judged as a whole: %v", st.NotJudged)
	}
}
