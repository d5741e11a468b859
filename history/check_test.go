package history

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
)

const pay = `{"event_id":"e1","amount":100,"currency":"USD"}`

// clean is a drained history with one event applied once.
func clean() ([]Op, State) {
	ops := []Op{
		{Step: "s:1", StepN: 0, Kind: Commit, EventID: "e1", Payload: pay},
		{Step: "s:2", StepN: 1, Kind: Publish, EventID: "e1", EntryID: "1-0", Payload: pay},
		{Step: "s:3", StepN: 2, Kind: Applied, EventID: "e1", EntryID: "1-0", Consumer: "c", Model: "c", Payload: pay, Acked: true},
	}
	st := State{
		Outbox: map[string]string{"e1": pay}, Unpublished: map[string]bool{}, Stream: map[string]int{"e1": 1}, HasStream: true,
		DeadLetters: map[string]bool{},
		Consumers: map[string]*Consumer{"c": {Inbox: map[string]string{"e1": pay},
			InboxSums: map[string]Sum{"USD": {Amount: 100, Events: 1}}, HasPending: true}},
		Projections: map[string]map[string]Sum{"c": {"USD": {Amount: 100, Events: 1}}},
		Books:       &Books{Journal: map[string]bool{"e1": true}},
	}
	return ops, st
}

// noEffect empties the consumer's inbox and read model: e1 had no effect.
func noEffect(st *State) {
	delete(st.Consumers["c"].Inbox, "e1")
	st.Consumers["c"].InboxSums = map[string]Sum{}
	st.Projections["c"] = map[string]Sum{}
}

func check(ops []Op, st State) []Violation {
	return Check(ops, st, []string{"c"}, map[string][]string{"c": {"c"}})
}

func TestCleanHistoryHasNoViolation(t *testing.T) {
	ops, st := clean()
	if vs := check(ops, st); len(vs) != 0 {
		t.Fatalf("clean history: %v", vs)
	}
}

// TestEachInvariantCanFail breaks a clean history one way per invariant;
// the checker must name exactly that invariant, with a witness where one
// exists.
func TestEachInvariantCanFail(t *testing.T) {
	cases := map[string]func(ops []Op, st *State) []Op{
		Lost: func(ops []Op, st *State) []Op {
			delete(st.Stream, "e1") // the broker lost it; nothing applied it
			noEffect(st)
			return ops[:2]
		},
		DoubleApplied: func(ops []Op, st *State) []Op {
			again := ops[2]
			again.EntryID, again.Step = "2-0", "s:4"
			st.Projections["c"]["USD"] = Sum{Amount: 200, Events: 2}
			st.Consumers["c"].InboxSums["USD"] = Sum{Amount: 200, Events: 2}
			return append(ops, again)
		},
		Phantom: func(ops []Op, st *State) []Op {
			ops[2].Payload = strings.Replace(pay, "100", "999", 1)
			return ops
		},
		AckedWithoutEffect: func(ops []Op, st *State) []Op {
			ops[2].Kind = "failed"
			noEffect(st)
			st.Stream["e1"] = 2 // a second entry waits, so it is not lost
			return ops
		},
		ProjectionMismatch: func(ops []Op, st *State) []Op {
			st.Projections["c"]["USD"] = Sum{Amount: 0, Events: 0}
			return ops
		},
		Stranded: func(ops []Op, st *State) []Op {
			ops[2].Kind, ops[2].Acked = "failed", false
			ops = append(ops, Op{Step: "s:4", Kind: Pass, Consumer: "c"})
			noEffect(st)
			st.Consumers["c"].Pending = 1
			return ops
		},
		Unbalanced: func(ops []Op, st *State) []Op {
			delete(st.Books.Journal, "e1") // the outbox row committed without its transfer
			return ops
		},
		Stuck: func(ops []Op, st *State) []Op {
			// A team's consumer ran for the whole settle, was handed e1
			// and never applied it; the broker still offers it.
			ops[2].Kind, ops[2].Acked = Delivered, false
			noEffect(st)
			st.Team = &Team{EntryEvents: map[string]string{"1-0": "e1"},
				Progress: &Progress{Consumers: map[string][]string{"c": {"service consumer"}}, Full: true, Limit: time.Second}}
			return ops
		},
		OutOfOrder: func(_ []Op, st *State) []Op {
			ops, s := ordered(2, 2, 1) // version 2 applied before version 1
			*st = s
			return ops
		},
		Gap: func(_ []Op, st *State) []Op {
			ops, s := ordered(3, 1, 3) // version 2 committed, never applied
			*st = s
			return ops
		},
		DoublePublished: func(ops []Op, st *State) []Op {
			dup := ops[1]
			dup.EntryID = "1-1"
			st.Stream["e1"] = 2
			return append(ops[:2:2], dup, ops[2])
		},
	}
	for _, inv := range InvariantNames() {
		t.Run(inv, func(t *testing.T) {
			breakIt, ok := cases[inv]
			if !ok {
				t.Fatalf("invariant %s has no case that breaks it", inv)
			}
			ops, st := clean()
			vs := check(breakIt(ops, &st), st)
			if len(vs) != 1 || vs[0].Invariant != inv {
				t.Fatalf("want one %s violation, got %v", inv, vs)
			}
			if inv != ProjectionMismatch && len(vs[0].Witness) == 0 {
				t.Errorf("%s has no witness", inv)
			}
		})
	}
}

// TestPurgeExcusesAckWithoutEffect: an event whose inbox row a later purge
// deleted had its effect when it was acked.
func TestPurgeExcusesAckWithoutEffect(t *testing.T) {
	ops, st := clean()
	ops = append(ops, Op{Step: "s:4", Kind: Purge, Consumer: "c"})
	noEffect(&st)
	for _, v := range check(ops, st) {
		if v.Invariant == AckedWithoutEffect {
			t.Errorf("purge after the ack: %v", v)
		}
	}
}

func TestSamePayloadIgnoresSpelling(t *testing.T) {
	if !SamePayload(`{"a":1,"b":"x"}`, `{"b": "x", "a": 1}`) || SamePayload(`{"a":1}`, `{"a":2}`) {
		t.Fatal("SamePayload compares by value")
	}
}

// TestPurgeIsNotAProjectionMismatch: a purge forgets what was applied, it
// does not undo it; the read model keeps the effect.
func TestPurgeIsNotAProjectionMismatch(t *testing.T) {
	ops, st := clean()
	ops = append(ops, Op{Step: "s:4", Kind: Purge, Consumer: "c"})
	delete(st.Consumers["c"].Inbox, "e1")
	st.Consumers["c"].InboxSums = map[string]Sum{}
	if vs := check(ops, st); len(vs) != 0 {
		t.Fatalf("purge after a clean history: %v", vs)
	}
}

// TestReplayedDeadLetterCanBeLost: a dead letter is excused while it waits
// in the dead-letter stream; once replayed, losing the replay is a loss.
func TestReplayedDeadLetterCanBeLost(t *testing.T) {
	ops, st := clean()
	ops[2].Kind, ops[2].DLQ = "failed", true
	ops = append(ops, Op{Step: "s:4", Kind: Publish, Republish: true, EventID: "e1", EntryID: "2-0", Payload: pay})
	st.Stream = map[string]int{} // the broker lost the replay
	noEffect(&st)
	vs := check(ops, st)
	if len(vs) != 1 || vs[0].Invariant != Lost {
		t.Fatalf("want lost, got %v", vs)
	}
}

// TestTrimKeepsAnUnreadEntry: the broker dropped the acked entry and kept a
// newer one the consumer has not read: not lost.
func TestTrimKeepsAnUnreadEntry(t *testing.T) {
	ops, st := clean()
	ops[2].Kind = "failed" // acked without effect (ack first), then ...
	ops = append(ops, Op{Step: "s:4", Kind: Publish, Republish: true, EventID: "e1", EntryID: "2-0", Payload: pay})
	st.Stream = map[string]int{"e1": 1} // trim kept the newest entry, 2-0
	noEffect(&st)
	for _, v := range check(ops, st) {
		if v.Invariant == Lost {
			t.Fatalf("entry 2-0 is unread and held: %v", v)
		}
	}
}

// TestEachWayTheBooksBreak: besides a torn produce, books whose balances do
// not cancel out or do not match their ledger are unbalanced.
func TestEachWayTheBooksBreak(t *testing.T) {
	for name, breakIt := range map[string]func(*Books){
		"journal without outbox": func(b *Books) { b.Journal["e2"] = true },
		"currency":               func(b *Books) { b.Unbalanced = []string{"USD"} },
		"drift":                  func(b *Books) { b.Drift = []string{"bob/USD"} },
	} {
		t.Run(name, func(t *testing.T) {
			ops, st := clean()
			breakIt(st.Books)
			if vs := check(ops, st); len(vs) != 1 || vs[0].Invariant != Unbalanced {
				t.Fatalf("want one unbalanced violation, got %v", vs)
			}
		})
	}
}

// Where the broker says what a group may still be handed, lost and stranded
// follow it, not the acks the history saw: e1 failed, was never acked, and
// the consumer read on. Finished by the broker: lost (the ack log would
// call it stranded). Still deliverable: neither. Undecided: neither judged
// for it, and said so.
func TestLostAndStrandedFollowTheBroker(t *testing.T) {
	for fate, want := range map[broker.Fate]string{broker.Finished: Lost, broker.Deliverable: "", broker.Undecided: ""} {
		ops, st := clean()
		ops[2].Kind, ops[2].Acked = "failed", false
		ops = append(ops, Op{Step: "s:4", Kind: Pass, Consumer: "c"})
		noEffect(&st)
		st.NotJudged = map[string]string{}
		cs := st.Consumers["c"]
		cs.HasPending = false // as on Kafka: no pending count
		cs.Reach, cs.HasReach = []broker.GroupEntry{{ID: "1-0", EventID: "e1", Fate: fate, Why: "the broker says so"}}, true
		var got []string
		for _, v := range check(ops, st) {
			got = append(got, v.Invariant)
			if !strings.Contains(v.Detail, "the broker says so") {
				t.Errorf("%v: %s does not give the broker's reason", fate, v)
			}
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%v: violations %v; want [%s]", fate, got, want)
		}
		_, lostOpen := st.NotJudged["lost (event e1 of c)"]
		_, strandedOpen := st.NotJudged["stranded (entry 1-0 of c)"]
		if undecided := fate == broker.Undecided; lostOpen != undecided || strandedOpen != undecided {
			t.Errorf("%v: not judged %v; want lost and stranded of e1 not judged exactly when undecided", fate, st.NotJudged)
		}
	}
}

// An entry the broker dead-lettered itself (RabbitMQ's x-delivery-limit,
// which leaves no ack in the history) is not stranded: it waits in the
// dead letters, where dlq.entries finds it.
func TestABrokerDeadLetterIsNotStranded(t *testing.T) {
	ops, st := clean()
	ops[2].Kind, ops[2].Acked = "failed", false
	ops = append(ops, Op{Step: "s:4", Kind: Pass, Consumer: "c"})
	noEffect(&st)
	st.Consumers["c"].HasPending = false // RabbitMQ cannot count a group's unacked entries
	st.DeadLetters["e1"] = true
	for _, v := range check(ops, st) {
		if v.Invariant == Stranded {
			t.Errorf("a dead-lettered entry judged stranded: %s", v)
		}
	}
}

// A claim takes a pending entry back only where a claim can take over what
// a live worker holds: on RabbitMQ or in a classic Kafka group
// (State.LiveKeeps) the entry stays with its worker, and a consumer that
// read on and then claimed still stranded it.
func TestAClaimThatCannotTakeItIsNoWayBack(t *testing.T) {
	for _, keeps := range []bool{false, true} {
		ops, st := clean()
		ops[2].Kind, ops[2].Acked = "failed", false
		ops = append(ops, Op{Step: "s:4", Kind: Pass, Consumer: "c"}, Op{Step: "s:5", Kind: Pass, Consumer: "c", TakesOver: true})
		noEffect(&st)
		st.Consumers["c"].HasPending = false
		st.LiveKeeps = keeps
		var got []string
		for _, v := range check(ops, st) {
			if v.Invariant == Stranded {
				got = append(got, v.String())
			}
		}
		switch {
		case !keeps && len(got) > 0:
			t.Errorf("a claim that could take the entry back: judged stranded: %v", got)
		case keeps && (len(got) != 1 || !strings.Contains(got[0], "its claims could not take it")):
			t.Errorf("a claim that cannot take what a live worker holds: got %v, want one stranded naming the claims", got)
		}
	}
}

// A nacked entry is back with the broker, where a live worker keeps none:
// a claim after it is a way back on every broker (RabbitMQ requeues it).
func TestANackedEntryIsNotStrandedByALiveKeeper(t *testing.T) {
	ops, st := clean()
	ops[2].Kind, ops[2].Acked, ops[2].Nacked = "failed", false, true
	ops = append(ops, Op{Step: "s:4", Kind: Pass, Consumer: "c"}, Op{Step: "s:5", Kind: Pass, Consumer: "c", TakesOver: true})
	noEffect(&st)
	st.Consumers["c"].HasPending = false
	st.LiveKeeps = true
	for _, v := range check(ops, st) {
		if v.Invariant == Stranded {
			t.Errorf("a nacked entry judged stranded: %s", v)
		}
	}
}

// TestLostWithNoConsumer: a scenario that never consumes still loses an
// event marked published that the broker holds no entry of (a mark_first
// relay that crashed before publishing); one the broker holds is on its way.
func TestLostWithNoConsumer(t *testing.T) {
	ops, st := clean()
	ops = ops[:1] // committed, marked, never published
	st.Stream = map[string]int{}
	st.Consumers = map[string]*Consumer{}
	vs := Check(ops, st, nil, nil)
	if len(vs) != 1 || vs[0].Invariant != Lost || vs[0].EventID != "e1" {
		t.Fatalf("want e1 lost, got %v", vs)
	}
	st.Stream = map[string]int{"e1": 1}
	if vs := Check(ops, st, nil, nil); len(vs) != 0 {
		t.Fatalf("held by the broker: want no violation, got %v", vs)
	}
	st.Stream, st.Unpublished = map[string]int{}, map[string]bool{"e1": true}
	if vs := Check(ops, st, nil, nil); len(vs) != 0 {
		t.Fatalf("still in the outbox: want no violation, got %v", vs)
	}
}
