package judge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/sysrun"
)

// A reader is at work on an entry only if it has been busy on the
// consumer's database without a break since about when the entry was
// handed: blocked on a statement since then (its wait is the proxy's), or
// in a transaction seen since then; one busy only now, or busy on the
// producer's database, is not.
func TestWorkingIsBusySinceTheEntryWasHanded(t *testing.T) {
	w := &watch{busySince: map[string]time.Time{}}
	now := time.Now()
	w.busyOn(sysrun.Live{Name: "blocked", Awaiting: [2]time.Duration{0, 6 * time.Second}}, now)
	w.busyOn(sysrun.Live{Name: "routine", InTx: []string{"consumer_db"}}, now)
	w.busyOn(sysrun.Live{Name: "relay", Awaiting: [2]time.Duration{6 * time.Second, 0}}, now)
	w.busyOn(sysrun.Live{Name: "blip", Awaiting: [2]time.Duration{0, 10 * time.Millisecond}}, now)
	working := w.working([]string{"routine", "relay", "blip", "blocked"})
	if got := working(6 * time.Second); got != "blocked" {
		t.Errorf("an entry idle 6s: working %q, want the reader blocked for 6s", got)
	}
	if got := w.working([]string{"routine", "relay", "blip"})(6 * time.Second); got != "" {
		t.Errorf("an entry idle 6s, readers busy only now or elsewhere: working %q, want none", got)
	}
	if got := w.working([]string{"routine"})(500 * time.Millisecond); got != "routine" {
		t.Errorf("an entry handed 0.5s ago, its reader in a transaction now: working %q, want it", got)
	}
	w.busyOn(sysrun.Live{Name: "blocked"}, now.Add(time.Second))
	if got := working(7 * time.Second); got != "" {
		t.Errorf("the blocked reader got its answer: working %q, want none", got)
	}
}

// pendingOnly is a broker whose group holds the given pending entries.
type pendingOnly []broker.PendingEntry

func (p pendingOnly) Groups(context.Context) ([]broker.Group, error) { return nil, nil }
func (p pendingOnly) PendingEntries(context.Context, string) ([]broker.PendingEntry, error) {
	return p, nil
}

// A reader busy since an entry was handed keeps the entry out of stranded
// only while its event is still owed (then stuck judges it); an applied
// event's entry it leaves pending is stranded as ever.
func TestABusyReaderSparesOnlyWhatItStillOwes(t *testing.T) {
	w := &watch{first: map[string]int64{}, retaken: map[string]bool{}, busySince: map[string]time.Time{}, owed: map[string]time.Time{}, limit: 2 * time.Second}
	w.busyOn(sysrun.Live{Name: "consumer", Awaiting: [2]time.Duration{0, 6 * time.Second}}, time.Now())
	w.owing([]string{"accounting/ev-2"}, time.Now())
	ins := pendingOnly{{ID: "1-0", EventID: "ev-1", Idle: 6 * time.Second, Deliveries: 1}, {ID: "2-0", EventID: "ev-2", Idle: 6 * time.Second, Deliveries: 1}}
	v := view{untaken: map[string][]history.Pending{}, undecided: map[string][]history.Pending{}}
	if err := w.pending(context.Background(), ins, "accounting", "service consumer", 0, false, w.working([]string{"consumer"}), &v); err != nil {
		t.Fatal(err)
	}
	if u := v.untaken["accounting"]; len(u) != 1 || u[0].EventID != "ev-1" {
		t.Errorf("untaken %+v: want ev-1's entry (applied, left pending) alone", u)
	}
	if u := v.undecided["accounting"]; len(u) != 1 || u[0].EventID != "ev-2" || !strings.Contains(u[0].Why, "service consumer, which reads the group, has held a transaction open") {
		t.Errorf("undecided %+v: want ev-2's entry (owed, its reader blocked on it)", u)
	}
}
