package history

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// racing is teamClean with e1 published again as entry 2-0 by a second
// relay process 5 ms after the first published it: what two replicas
// without FOR UPDATE SKIP LOCKED do.
func racing() ([]Op, State) {
	ops, st := teamClean()
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ops[1].At, ops[1].Proc = t0, Proc{N: 1, Service: "relay-1"}
	again := ops[1]
	again.EntryID, again.StepN, again.At, again.Proc = "2-0", again.StepN+2<<10, t0.Add(5*time.Millisecond), Proc{N: 2, Service: "relay-2"}
	again.Step = "system.yaml (service relay-2, start 2, via its broker proxy) XADD"
	st.Team.EntryEvents["2-0"] = "e1"
	st.Stream["e1"] = 2
	return append(ops, again), st
}

// Two relay processes publishing one committed event with nothing between
// is double_published, both publishes the witness.
func TestCrossProcessDoublePublish(t *testing.T) {
	ops, st := racing()
	vs := check(ops, st)
	if len(vs) != 1 || vs[0].Invariant != DoublePublished || len(vs[0].Witness) != 2 {
		t.Fatalf("violations %v, want one double_published with both publishes", vs)
	}
	got := vs[0].String()
	for _, want := range []string{"double_published: event e1: published 2 times; relay-1 (start 1) published it at 12:00:00.000000 and relay-2 (start 2) again at 12:00:00.005000",
		"no fault struck either process, neither ended and no step faulted a server between the two", "relay: published entry 1-0", "(service relay-2, start 2, via its broker proxy) XADD: published entry 2-0"} {
		if !strings.Contains(got, want) {
			t.Errorf("the violation lacks %q:\n%s", want, got)
		}
	}
}

// A disruption between the two publishes explains the second: at least
// once, no violation. One before the first, or after the second, does not.
func TestCrossProcessRepublishAfterADisruption(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		d    Disruption
		held bool // the second publish is a retry
	}{
		{"a fault on the first relay between", Disruption{At: t0.Add(2 * time.Millisecond), What: "the fault producer_db.commit(table=payment_outbox) do=error struck relay-1 (start 1)", Of: 1}, true},
		// A consumer's fault cannot make a relay publish again.
		{"a fault on another service between", Disruption{At: t0.Add(2 * time.Millisecond), What: "the fault consumer_db.commit(table=inbox) do=error struck consumer (start 3)", Of: 3}, false},
		{"the first relay ended between", Disruption{At: t0.Add(time.Millisecond), What: "relay-1 (start 1) ended: killed by the kill step", Of: 1}, true},
		{"a step's server fault between", Disruption{At: t0.Add(time.Millisecond), What: "the step producer_db: restart"}, true},
		// A step that began before the first publish and lasted past it
		// (a server restart the first relay's mark ran into).
		{"a step's server fault spanning the first publish", Disruption{At: t0.Add(-time.Millisecond), Until: t0.Add(3 * time.Millisecond), What: "the step producer_db: restart"}, true},
		{"a step's server fault over before the first publish", Disruption{At: t0.Add(-3 * time.Millisecond), Until: t0.Add(-time.Millisecond), What: "the step producer_db: restart"}, false},
		// The strike's time is its request's: before the struck publish
		// is recorded, but on that process's wire the pass it began
		// follows it.
		{"a broker fault on the first publish itself", Disruption{At: t0.Add(-time.Millisecond), What: "the fault broker.reply(XADD) do=delay(1s) struck relay-1 (start 1)", Proc: 1, PassAfter: 1, Of: 1}, true},
		{"a fault before the first publish", Disruption{At: t0.Add(-time.Millisecond), What: "the fault consumer_db.commit(table=inbox) do=error struck consumer"}, false},
		{"a fault after the second", Disruption{At: t0.Add(6 * time.Millisecond), What: "the fault consumer_db.commit(table=inbox) do=error struck consumer"}, false},
		// The second relay's own request struck: its publish is that
		// pass's, so the fault came with it, not before it.
		{"a broker fault on the second publish itself", Disruption{At: t0.Add(4 * time.Millisecond), What: "the fault broker.reply(XADD) do=delay(1s) struck relay-2 (start 2)", Proc: 2, PassAfter: 1, Of: 2}, false},
		// The second publish is recorded at its reply, which the fault
		// held: its request went out before the first (relay-2's), whose
		// relay took the row once relay-1 gave up. At least once.
		{"the later-recorded publish's own request struck before the first", Disruption{At: t0.Add(-time.Millisecond), What: "the fault broker.reply(XADD) do=delay(1s) struck relay-2 (start 2)", Proc: 2, PassAfter: 1, Of: 2}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ops, st := racing()
			st.Team.Disruptions = []Disruption{c.d}
			vs := check(ops, st)
			if c.held && len(vs) != 0 {
				t.Errorf("a re-publish after %q: %v, want no violation", c.d.What, vs)
			}
			if !c.held && (len(vs) != 1 || vs[0].Invariant != DoublePublished) {
				t.Errorf("%q does not explain the second publish: %v, want double_published", c.d.What, vs)
			}
		})
	}
}

// Where the wire cannot tell (a proxy that missed publishes), the
// invariant is not judged, with why: never "no violation".
func TestCrossProcessNotJudged(t *testing.T) {
	ops, st := racing()
	why := "on nats: the NATS proxy passed on 3 repl(ies) without pairing them with their publish"
	st.NotJudged[DoublePublished] = why
	if vs := check(ops, st); len(vs) != 0 {
		t.Errorf("not judged, yet %v", vs)
	}
	if st.NotJudged[DoublePublished] != why {
		t.Errorf("the reason is gone: %q", st.NotJudged[DoublePublished])
	}
	// One process twice in one pass stays the per-process rule's; a
	// forged event (not committed) is not double_published.
	ops, st = racing()
	ops[3].Proc, ops[3].StepN = ops[1].Proc, ops[1].StepN
	if vs := check(ops, st); len(vs) != 1 || !strings.Contains(vs[0].Detail, "one relay step published it 2 times") {
		t.Errorf("one process twice in one pass: %v", vs)
	}
	ops, st = racing()
	delete(st.Outbox, "e1")
	for _, v := range check(ops, st) {
		if v.Invariant == DoublePublished {
			t.Errorf("an uncommitted event: %v", v)
		}
	}
}

// A process that was handed the event before it published it is a
// consumer forwarding what it read (a retry by re-publishing, an output),
// not a relay racing another: not a cross-process double publish.
func TestCrossProcessConsumerRepublishIsNoRace(t *testing.T) {
	ops, st := racing()
	again := ops[len(ops)-1]
	handed := Op{Step: "consumer's proxy XREADGROUP", Kind: Delivered, EventID: "e1", EntryID: "1-0", Consumer: "c",
		At: again.At.Add(-time.Millisecond), Proc: again.Proc}
	ops = append(ops[:len(ops)-1], handed, again)
	for _, v := range check(ops, st) {
		if v.Invariant == DoublePublished {
			t.Errorf("a consumer's re-publish of what it was handed: %v", v)
		}
	}
	// Handed it only after it published: still a relay's race.
	ops[len(ops)-2], ops[len(ops)-1] = again, handed
	if vs := check(ops, st); !slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == DoublePublished }) {
		t.Errorf("a publish before the process was handed the event: %v, want double_published", vs)
	}
}
