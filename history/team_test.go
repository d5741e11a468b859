package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/state"
)

// teamClean is a team's drained system: e1 committed, published as entry
// 1-0, delivered to c and acked; c's inbox row and read model agree.
func teamClean() ([]Op, State) {
	ops := []Op{
		{Step: "s:1", StepN: 0, Kind: Commit, EventID: "e1", Payload: pay},
		{Step: "relay", StepN: 1 << 20, Kind: Publish, EventID: "e1", EntryID: "1-0", Payload: pay},
		{Step: "consumer", StepN: 1 << 20, Kind: Delivered, EventID: "e1", EntryID: "1-0", Consumer: "c", Model: "c", Payload: pay, Acked: true},
	}
	st := State{
		Outbox: map[string]string{"e1": pay}, Unpublished: map[string]bool{}, Stream: map[string]int{"e1": 1}, HasStream: true,
		DeadLetters: map[string]bool{},
		Consumers: map[string]*Consumer{"c": {Rows: []state.InboxRow{{Consumer: "c", Key: "e1", Payload: pay}},
			InboxSums: map[string]Sum{"USD": {Amount: 100, Events: 1}}, HasPending: true}},
		Projections: map[string]map[string]Sum{"c": {"USD": {Amount: 100, Events: 1}}},
		Team:        &Team{EntryEvents: map[string]string{"1-0": "e1"}, Readers: map[string]bool{"c": true}},
		NotJudged:   map[string]string{},
	}
	return ops, st
}

func TestTeamCleanHasNoViolation(t *testing.T) {
	ops, st := teamClean()
	if vs := check(ops, st); len(vs) != 0 {
		t.Fatalf("clean team system: %v", vs)
	}
}

// Each team-only bug must be named with its invariant and a detail that
// says what the final state shows; its correct twin (teamClean) passes.
func TestTeamInvariantsFromTheFinalState(t *testing.T) {
	const forged = `{"event_id":"e1","amount":999,"currency":"USD"}`
	cases := []struct {
		name   string
		breaks func(ops []Op, st *State) []Op
		want   []string // "invariant: detail fragment"
	}{
		{"dedupe on the entry id applies a re-publish twice", func(ops []Op, st *State) []Op {
			st.Team.EntryEvents["2-0"] = "e1"
			st.Stream["e1"] = 2
			cs := st.Consumers["c"]
			cs.Rows = []state.InboxRow{{Consumer: "c", Key: "1-0", Payload: pay}, {Consumer: "c", Key: "2-0", Payload: pay}}
			cs.InboxSums["USD"] = Sum{Amount: 200, Events: 2}
			st.Projections["c"]["USD"] = Sum{Amount: 200, Events: 2}
			again := ops[1]
			again.EntryID, again.StepN = "2-0", again.StepN+1 // a restarted relay
			return append(ops, again)
		}, []string{DoubleApplied + ": consumer c, event e1: the inbox holds 2 rows for it (keys 1-0, 2-0): 2 of them keyed by the broker entry id",
			DoubleApplied + ": consumer c, read model c, USD: it counts 2 events, but the inbox holds 1 distinct"}},
		{"a forged copy another amount applied by a consumer that does not dedupe", func(ops []Op, st *State) []Op {
			// The inbox keeps the first row (ON CONFLICT DO NOTHING); the
			// read model moved by both.
			st.Projections["c"]["USD"] = Sum{Amount: 1099, Events: 2}
			return ops
		}, []string{DoubleApplied + ": consumer c, read model c, USD: it counts 2 events",
			Phantom + ": consumer c, read model c, USD: its 1 extra move(s) add 999, but the events were committed with amounts from 100 to 100",
			ProjectionMismatch + ": read model c, USD"}},
		{"a consumer that does not dedupe applies a redelivery: no phantom", func(ops []Op, st *State) []Op {
			st.Projections["c"]["USD"] = Sum{Amount: 200, Events: 2}
			return ops
		}, []string{DoubleApplied + ": consumer c, read model c, USD: it counts 2 events",
			ProjectionMismatch + ": read model c, USD"}},
		{"a forged copy overwrites the inbox row and moves the read model", func(ops []Op, st *State) []Op {
			cs := st.Consumers["c"]
			cs.Rows[0].Payload = forged
			cs.InboxSums["USD"] = Sum{Amount: 999, Events: 1}
			st.Projections["c"]["USD"] = Sum{Amount: 1099, Events: 2}
			return ops
		}, []string{Phantom + ": consumer c, event e1: the inbox row applied payload " + forged,
			DoubleApplied + ": consumer c, read model c, USD: it counts 2 events",
			ProjectionMismatch + ": read model c, USD: projection has 1099 over 2 events, the inbox of c sums to 999 over 1"}},
		{"an inbox row for an event nobody committed", func(ops []Op, st *State) []Op {
			cs := st.Consumers["c"]
			cs.Rows = append(cs.Rows, state.InboxRow{Consumer: "c", Key: "zz-9", Payload: `{"amount":5,"currency":"USD"}`})
			cs.InboxSums["USD"] = Sum{Amount: 105, Events: 2}
			st.Projections["c"]["USD"] = Sum{Amount: 105, Events: 2}
			return ops
		}, []string{Phantom + ": consumer c, event zz-9: the inbox holds a row for zz-9, which nobody committed"}},
		// A publish step's event nobody committed, delivered and acked: its
		// row is the effect the ack needs (phantom, never acked_without_effect).
		{"an entry of an event nobody committed, applied and acked", func(ops []Op, st *State) []Op {
			const zz = `{"event_id":"zz-9","amount":5,"currency":"USD"}`
			cs := st.Consumers["c"]
			cs.Rows = append(cs.Rows, state.InboxRow{Consumer: "c", Key: "zz-9", Payload: zz})
			cs.InboxSums["USD"] = Sum{Amount: 105, Events: 2}
			st.Projections["c"]["USD"] = Sum{Amount: 105, Events: 2}
			st.Team.EntryEvents["2-0"] = "zz-9"
			return append(ops, Op{Step: "s:2", StepN: 1, Kind: Delivered, EventID: "zz-9", EntryID: "2-0", Consumer: "c", Model: "c", Payload: zz, Acked: true})
		}, []string{Phantom + ": consumer c, event zz-9: the inbox holds a row for zz-9, which nobody committed"}},
		{"a forged amount applied to the read model alone", func(ops []Op, st *State) []Op {
			st.Projections["c"]["USD"] = Sum{Amount: 999, Events: 1}
			return ops
		}, []string{Phantom + ": consumer c, read model c, USD: it holds 999 over 1 events, but the events in the inbox were committed with 100",
			ProjectionMismatch + ": read model c, USD: projection has 999 over 1 events, the inbox of c sums to 100 over 1"}},
		{"an entry refused, never retried, left pending while the consumer runs", func(ops []Op, st *State) []Op {
			cs := st.Consumers["c"]
			cs.Rows, cs.InboxSums, cs.Pending = nil, map[string]Sum{}, 1
			st.Projections["c"] = map[string]Sum{}
			cs.Untaken = []Pending{{EntryID: "1-0", EventID: "e1", Holder: "w1", Deliveries: 1}}
			ops[2].Acked = false
			return ops
		}, []string{Stranded + ": consumer c, event e1: entry 1-0 is still pending (held by w1, delivered 1 time(s)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ops, st := teamClean()
			ops = tc.breaks(ops, &st)
			vs := check(ops, st)
			var got []string
			for _, v := range vs {
				got = append(got, v.String())
			}
			all := strings.Join(got, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("want %q among:\n%s", w, all)
				}
			}
			if len(vs) != len(tc.want) {
				t.Errorf("want %d violations, got %d:\n%s", len(tc.want), len(vs), all)
			}
		})
	}
}

// A pending entry whose consumer is no longer running is not stranded: the
// scenario ended inside a fault window, and a consumer that starts later
// may take it.
func TestTeamPendingWithoutALiveReaderIsNotStranded(t *testing.T) {
	ops, st := teamClean()
	cs := st.Consumers["c"]
	cs.Rows, cs.InboxSums, cs.Pending = nil, map[string]Sum{}, 1
	st.Projections["c"] = map[string]Sum{}
	cs.Untaken = []Pending{{EntryID: "1-0", EventID: "e1"}}
	ops[2].Acked = false
	st.Team.Readers = map[string]bool{}
	for _, v := range check(ops, st) {
		t.Errorf("unexpected %s", v)
	}
}

// An invariant the evidence cannot decide is left out, never passed.
func TestNotJudgedIsNeverReported(t *testing.T) {
	ops, st := teamClean()
	noEffect := st.Consumers["c"]
	noEffect.Rows, noEffect.InboxSums = nil, map[string]Sum{}
	st.Projections["c"] = map[string]Sum{}
	st.NotJudged[AckedWithoutEffect] = "no proxy"
	st.NotJudged[Lost] = "no proxy"
	if vs := check(ops, st); len(vs) != 0 {
		t.Errorf("not judged invariants reported: %v", vs)
	}
	delete(st.NotJudged, Lost)
	if vs := check(ops, st); len(vs) != 1 || vs[0].Invariant != Lost {
		t.Errorf("want lost alone once judged again, got %v", vs)
	}
}

// Where the broker gives entries no id the wire shows (AMQP), copies are
// counted: lost while the group settled every copy the broker's log took
// and applied none; not while a copy stays unsettled (a republish the
// consumer has not been handed yet, an unacked delivery requeued).
func TestTeamCopiesCounted(t *testing.T) {
	ackFirst := func() ([]Op, State) {
		ops, st := teamClean()
		for i := range ops {
			ops[i].EntryID = ""
		}
		st.Consumers["c"].Rows, st.Consumers["c"].InboxSums, st.Projections["c"] = nil, map[string]Sum{}, map[string]Sum{}
		st.Team.EntryEvents, st.Team.Copies = map[string]string{}, map[string]int{"e1": 1}
		return ops, st
	}
	ops, st := ackFirst()
	vs := check(ops, st)
	want := "lost: consumer c, event e1: committed, never applied, and group c's consumers settled every copy of it the broker took (1): acked, or rejected without requeue"
	if !strings.Contains(fmt.Sprint(vs), want) || !strings.Contains(fmt.Sprint(vs), "acked_without_effect: consumer c, event e1: a delivery of it was acked") {
		t.Errorf("ack-first: want %q, got %v", want, vs)
	}
	ops, st = ackFirst()
	st.Team.Copies["e1"] = 2 // the relay published it again: one copy is still the group's
	if vs := check(ops, st); hasInvariant(vs, Lost) {
		t.Errorf("a copy unsettled: %v", vs)
	}
	ops, st = ackFirst()
	ops[2].Acked = false // handed, never settled: requeued when its channel closed
	if vs := check(ops, st); hasInvariant(vs, Lost) {
		t.Errorf("a delivery never settled: %v", vs)
	}
	ops, st = ackFirst()
	st.Team.Copies = map[string]int{} // marked published, never taken
	if vs := check(ops, st); !strings.Contains(fmt.Sprint(vs), "lost: consumer c, event e1: committed, never applied, and the broker took no copy of it") {
		t.Errorf("never published: %v", vs)
	}
}

func hasInvariant(vs []Violation, inv string) bool {
	for _, v := range vs {
		if v.Invariant == inv {
			return true
		}
	}
	return false
}

// The extra moves of a read model are measured against every committed
// amount, not the inbox's only: a committed event applied without its
// inbox row (999) is no amount nobody committed.
func TestAnExtraMoveOfACommittedEventIsNoPhantom(t *testing.T) {
	ops, st := teamClean()
	st.Outbox["e2"] = `{"event_id":"e2","amount":999,"currency":"USD"}`
	st.Unpublished["e2"] = true // not lost: still waiting
	st.Projections["c"]["USD"] = Sum{Amount: 1099, Events: 2}
	for _, v := range check(ops, st) {
		if v.Invariant == Phantom {
			t.Errorf("phantom for a committed amount: %s", v)
		}
	}
}

// stuckState is teamClean with e1 handed to c and never applied, while a
// consumer of c ran at the end: progress p.
func stuckState(p *Progress) ([]Op, State) {
	ops, st := teamClean()
	ops[2].Acked = false
	cs := st.Consumers["c"]
	cs.Rows, cs.InboxSums = nil, map[string]Sum{}
	st.Projections["c"] = map[string]Sum{}
	st.Team.Progress = p
	return ops, st
}

// Stuck is judged only where the running system had the whole settle
// and the event still had a path: each other case is no violation or
// not judged, never both.
func TestStuckNeedsTheWholeSettleAndARunningConsumer(t *testing.T) {
	running := map[string][]string{"c": {"service consumer (pid 7; its last lines: \"connection already closed\")"}}
	cases := []struct {
		name      string
		p         *Progress
		amend     func(st *State)
		want      string // the one violation's detail fragment, "" for none
		notJudged string // a NotJudged key that must be there, "" for none
	}{
		{"the consumer ran for the whole settle", &Progress{Consumers: running, Full: true, Limit: 5 * time.Second}, nil,
			"stuck: consumer c, event e1: committed and published, never applied, although a consumer of c ran for the whole settle (5s): handed to it 1 time(s), never acked; service consumer (pid 7", ""},
		{"settling ended early", &Progress{Consumers: running, EarlyWhy: "ended early"}, nil, "", "stuck (event e1 of c)"},
		{"no consumer of c runs", &Progress{Consumers: map[string][]string{"other": {"x"}}, Full: true}, nil, "", ""},
		{"dead-lettered", &Progress{Consumers: running, Full: true}, func(st *State) { st.DeadLetters["e1"] = true }, "", ""},
		{"lost is said once, as lost", &Progress{Consumers: running, Full: true}, func(st *State) { st.Stream = map[string]int{} },
			"lost: consumer c, event e1", ""},
		{"unpublished while the relay runs", &Progress{Relays: []string{"service relay"}, Full: true, Limit: time.Second},
			func(st *State) { st.Unpublished["e1"] = true }, "stuck: event e1: committed, and still unpublished in the outbox after the whole settle (1s) while the services that use the producer's database ran: service relay", ""},
		{"settling did not say who ran", nil, nil, "", "stuck"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ops, st := stuckState(c.p)
			if c.amend != nil {
				c.amend(&st)
			}
			vs := check(ops, st)
			switch {
			case c.want == "" && len(vs) != 0:
				t.Fatalf("want no violation, got %v", vs)
			case c.want != "" && (len(vs) != 1 || !strings.Contains(vs[0].String(), c.want)):
				t.Fatalf("want one violation with %q, got %v", c.want, vs)
			case c.want != "" && len(vs[0].Witness) == 0:
				t.Errorf("%s has no witness", vs[0].Invariant)
			}
			if _, ok := st.NotJudged[c.notJudged]; c.notJudged != "" && !ok {
				t.Errorf("NotJudged lacks %q: %v", c.notJudged, st.NotJudged)
			}
			if c.notJudged == "" {
				for k := range st.NotJudged {
					if strings.HasPrefix(k, Stuck) {
						t.Errorf("stuck not judged (%s: %s) where it was", k, st.NotJudged[k])
					}
				}
			}
		})
	}
}

// A team's consumer that acked an event it moved to its declared
// dead-letter destination acked it rightly; the same ack with no dead
// letter is an ack without effect.
func TestTeamDeadLetterAckHasAnEffect(t *testing.T) {
	for _, dead := range []bool{true, false} {
		ops, st := stuckState(&Progress{})
		ops[2].Acked = true
		st.Stream = map[string]int{"e1": 1}
		st.DeadLetters["e1"] = dead
		vs := check(ops, st)
		got := ""
		for _, v := range vs {
			got += v.Invariant + " "
		}
		if dead && got != "" || !dead && !strings.Contains(got, AckedWithoutEffect) {
			t.Errorf("dead-lettered %v: violations %q", dead, got)
		}
	}
}
