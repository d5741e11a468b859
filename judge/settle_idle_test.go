package judge

import (
	"testing"
	"time"

	"github.com/outboxdrill/runner/sysrun"
)

// The quiet window ends early only on evidence from every live service
// that it is idle; anything else waits it out.
func TestQuietEndsEarlyOnlyWhenEveryServiceIsIdle(t *testing.T) {
	change := time.Unix(1000, 0)
	now := change.Add(2 * settlePoll)
	polled, before := change.Add(settlePoll), change.Add(-time.Millisecond)
	relay := sysrun.Live{Name: "relay", Producer: true}
	consumer := func(poll time.Time) sysrun.Live {
		return sysrun.Live{Name: "consumer", Consumer: true, IdlePoll: poll}
	}
	cases := []struct {
		name    string
		now     time.Time
		holding bool
		live    []sysrun.Live
		want    bool
	}{
		{"a consumer polled idle after the change", now, false, []sysrun.Live{relay, consumer(polled)}, true},
		{"its last idle poll was before the change", now, false, []sysrun.Live{relay, consumer(before)}, false},
		{"its proxy cannot tell (no idle poll)", now, false, []sysrun.Live{consumer(time.Time{})}, false},
		{"not one more look at the still state yet", change.Add(settlePoll / 2), false, []sysrun.Live{consumer(polled)}, false},
		{"a delay fault holds a reply", now, true, []sysrun.Live{consumer(polled)}, false},
		{"a service holds a transaction open", now, false, []sysrun.Live{consumer(polled), {Name: "relay", Producer: true, InTx: []string{"producer_db"}}}, false},
		{"a service is being restarted", now, false, []sysrun.Live{consumer(polled), {Name: "relay", Producer: true, Restarting: true}}, false},
		{"only producers: no evidence at all", now, false, []sysrun.Live{relay}, false},
		{"another reader of the broker never polled", now, false, []sysrun.Live{consumer(polled), {Name: "audit", Consumer: true}}, false},
		{"a service neither side says nothing", now, false, []sysrun.Live{consumer(polled), {Name: "cron"}}, false},
	}
	for _, c := range cases {
		if got := idle(c.now, change, c.holding, c.live); got != c.want {
			t.Errorf("%s: idle = %v, want %v", c.name, got, c.want)
		}
	}
}
