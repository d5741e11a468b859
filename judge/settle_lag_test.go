package judge

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/sysrun"
)

// On a broker that counts a group's unfinished entries (NATS, Kafka), a
// group with some while a consumer runs is work still to come: settling
// waits for it (softly); with no consumer running nobody will do it.
func TestLaggingGroupsAreWaitedForWhileAConsumerRuns(t *testing.T) {
	lag := map[string]int64{"accounting": 2, "audit": 0}
	live := []sysrun.Live{{Name: "relay", Producer: true}, {Name: "consumer", Consumer: true}}
	got := lagging(lag, live)
	if len(got) != 1 || !strings.Contains(got[0], "group accounting has 2 entr(ies) it has not finished with, as the broker counts them, and service consumer runs") {
		t.Errorf("a consumer runs: %q", got)
	}
	if got := lagging(lag, live[:1]); len(got) != 0 {
		t.Errorf("no consumer runs, yet waited for: %q", got)
	}
}
