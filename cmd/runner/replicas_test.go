package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Two replicas of the Go payments relay drain one outbox while it fills,
// no fault injected: the relay that reads its rows without FOR UPDATE SKIP
// LOCKED races and fails naming double_published, with no fault struck
// between the two publishes; the locking relay passes. Three runs each: a
// race is a matter of timing, and the verdict must not be.
func TestReplicatedRelaysRace(t *testing.T) {
	t.Parallel()
	payments := "PAYMENTS_BIN=" + paymentsService(t)
	const sc = "../../examples/go-payments/scenarios/relays-drain-one-outbox.yaml" // its system: system-replicas.yaml
	for _, bug := range []string{"", "no-skip-locked"} {
		for run := 1; run <= 3; run++ {
			t.Run(fmt.Sprintf("BUG=%s/run-%d", bug, run), func(t *testing.T) {
				t.Parallel()
				code, out, errOut := cliEnv(t, []string{payments, "BUG=" + bug}, "run", sc)
				if bug == "" {
					if code != exitOK {
						t.Fatalf("the locking relays: exit %d, want 0\n%s\n%s", code, out, errOut)
					}
					return
				}
				if code != exitFailed {
					t.Fatalf("BUG=%s: exit %d, want 1\n%s\n%s", bug, code, out, errOut)
				}
				if named := namedInvariants(out); !slices.Contains(named, "double_published") {
					t.Fatalf("BUG=%s: the checker named %v, want double_published\n%s", bug, named, out)
				}
				for _, want := range []string{"no fault struck, no process ended and no step faulted a server between the two",
					"(service relay-1, start ", "(service relay-2, start ", "XADD: published entry "} {
					if !strings.Contains(out, want) {
						t.Errorf("BUG=%s: the witness lacks %q\n%s", bug, want, out)
					}
				}
			})
		}
	}
}
