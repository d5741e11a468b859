package judge

import (
	"testing"
	"time"

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
