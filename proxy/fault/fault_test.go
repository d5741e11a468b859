package fault

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestArmedStrikesOnceAtNth(t *testing.T) {
	a, err := NewArmed(Action{Do: Cut}, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 5 {
		got = append(got, a.Take())
	}
	if want := []bool{false, false, true, false, false}; !equal(got, want) {
		t.Fatalf("Take: %v, want %v", got, want)
	}
	closed := false
	if a.Hold(nil, func() { closed = true }, func() bool { t.Error("a cut passed the reply"); return true }) || !closed {
		t.Error("a cut must close the connection and stop it")
	}
	if !a.Fired() || a.Err() != nil || a.Waiting() {
		t.Errorf("after the cut: fired=%v err=%v waiting=%v", a.Fired(), a.Err(), a.Waiting())
	}
}

func TestActionsSayWhatTheyLack(t *testing.T) {
	for _, a := range []Action{{Do: Kill}, {Do: Delay}, {Do: Do(9)}} {
		if a.Check() == nil {
			t.Errorf("%v: no error", a)
		}
	}
	a, _ := NewArmed(Action{Do: Error}, 0)
	a.Fail(&Unclassifiable{Reason: "tls"})
	var u *Unclassifiable
	if a.Take() || !errors.As(a.Err(), &u) {
		t.Errorf("a failed trigger: take=%v err=%v", a.Take(), a.Err())
	}
	d, _ := NewArmed(Action{Do: Delay, Delay: time.Millisecond}, 1)
	passed := false
	if !d.Hold(make(chan struct{}), func() {}, func() bool { passed = true; return true }) || !passed {
		t.Error("a delay must pass the reply on")
	}
}

func equal(a, b []bool) bool { return slices.Equal(a, b) }

// A delay that struck holds the reply until it runs out: Holding says so,
// and says nothing for one that has not struck or has passed the reply on.
func TestDelayIsHoldingUntilItRunsOut(t *testing.T) {
	d, _ := NewArmed(Action{Do: Delay, Delay: 200 * time.Millisecond}, 1)
	if d.Holding() {
		t.Error("holding before it struck")
	}
	if !d.Take() {
		t.Fatal("the first crossing did not strike")
	}
	held := make(chan bool)
	go func() { held <- d.Hold(make(chan struct{}), func() {}, func() bool { return true }) }()
	time.Sleep(50 * time.Millisecond)
	if !d.Holding() {
		t.Error("not holding during its delay")
	}
	<-held
	if d.Holding() {
		t.Error("still holding after the delay passed the reply")
	}
	k, _ := NewArmed(Action{Do: Cut}, 1)
	k.Take()
	if k.Holding() {
		t.Error("a cut that struck counts as holding")
	}
}

// The vocabulary a trigger is written in: every link names its
// boundaries, each name reads back, and On spells the trigger as the
// system file writes it.
func TestTriggerVocabulary(t *testing.T) {
	if got := LinkNames(); !slices.Equal(got, []string{"broker", "consumer_db", "producer_db"}) {
		t.Errorf("links %v", got)
	}
	for _, name := range LinkNames() {
		l, ok := LinkNamed(name)
		if !ok || l.String() != name || len(l.Boundaries()) != 2 {
			t.Errorf("%s: %v %v, boundaries %v", name, l, ok, l.Boundaries())
		}
		for _, b := range l.BoundaryNames() {
			if got, ok := l.Boundary(b); !ok || got.String() != b {
				t.Errorf("%s.%s reads back as %v", name, b, got)
			}
		}
	}
	if _, ok := Broker.Boundary("commit"); ok {
		t.Error("the broker link has a commit boundary")
	}
	for want, tr := range map[string]Trigger{
		"consumer_db.commit(table=inbox) nth=1 do=kill": {Link: ConsumerDB, Boundary: Commit, Filter: Filter{Table: "inbox"}, Action: Action{Do: Kill}},
		"producer_db.statement() nth=2 do=cut":          {Link: ProducerDB, Boundary: Statement, Nth: 2, Action: Action{Do: Cut}},
		"broker.reply(XADD) nth=1 do=delay(250ms)":      {Link: Broker, Boundary: Reply, Filter: Filter{Command: "XADD"}, Action: Action{Do: Delay, Delay: 250 * time.Millisecond}},
		"broker.request(XGROUP.CREATE) nth=3 do=error":  {Link: Broker, Boundary: Request, Filter: Filter{Command: "XGROUP.CREATE"}, Nth: 3, Action: Action{Do: Error}},
	} {
		if got := tr.String(); got != want {
			t.Errorf("%+v reads %q; want %q", tr, got, want)
		}
	}
}

type sizedEvent struct {
	n      int
	strike bool
}

func (e sizedEvent) RecordSize() (int, bool) { return e.n, e.strike }

type noTrigger struct{}

func (*noTrigger) Waiting() bool { return false }

// TestRecordIsBounded: a record keeps events up to its byte bound, then
// counts what it leaves out, and keeps a strike whatever the bound.
func TestRecordIsBounded(t *testing.T) {
	var r Registry[*noTrigger, sizedEvent]
	r.Bound(10 << 10)
	for range 20 {
		r.Record(sizedEvent{n: 1 << 10})
	}
	r.Record(sizedEvent{n: 1 << 10, strike: true})
	es := r.Events()
	if kept := len(es) - 1; kept < 7 || kept > 9 || r.Dropped() != int64(20-kept) {
		t.Errorf("kept %d of 20 events of 1 kB (+%d each) under 10 kB, dropped %d", kept, eventOverhead, r.Dropped())
	}
	if !es[len(es)-1].strike {
		t.Error("a strike past the bound was left out")
	}
}

// TestRecordKeepsOrderAcrossChunks: the record's chunks read back as one
// list, in the order recorded.
func TestRecordKeepsOrderAcrossChunks(t *testing.T) {
	var r Registry[*noTrigger, sizedEvent]
	const n = 3*eventChunk + 7
	for i := range n {
		r.Record(sizedEvent{n: i})
	}
	es := r.Events()
	if len(es) != n {
		t.Fatalf("%d events back of %d recorded", len(es), n)
	}
	for i, e := range es {
		if e.n != i {
			t.Fatalf("event %d is the %dth recorded", i, e.n)
		}
	}
}

// Counted is closed at the first crossing a trigger counts, long before
// its nth; a retired trigger counts nothing more and never strikes.
func TestCountedAtTheFirstCrossing(t *testing.T) {
	a, err := NewArmed(Never, 3)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Counted():
		t.Fatal("counted before any crossing")
	default:
	}
	if a.Take() {
		t.Fatal("struck at the first of three")
	}
	select {
	case <-a.Counted():
	default:
		t.Fatal("not counted after the first crossing")
	}
	a.Retire()
	if a.Waiting() || a.Take() || a.Take() || a.Fired() || !errors.Is(a.Err(), ErrRetired) {
		t.Errorf("retired: waiting %v fired %v err %v, want it given up", a.Waiting(), a.Fired(), a.Err())
	}
}
