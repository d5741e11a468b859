package main

import (
	"fmt"
	"os"
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
				for _, want := range []string{"no fault struck either process, neither ended and no step faulted a server between the two",
					"(service relay-1, start ", "(service relay-2, start ", "XADD: published entry "} {
					if !strings.Contains(out, want) {
						t.Errorf("BUG=%s: the witness lacks %q\n%s", bug, want, out)
					}
				}
			})
		}
	}
}

// A fault strikes one process: armed on a replicated service it is a load
// error at the fault's on:, naming the replicas; a misspelt service name
// suggests the service or a replica. Nothing runs (exit 2).
func TestReplicatedServiceFaultNamesOneReplica(t *testing.T) {
	t.Parallel()
	sys := mustAbs(t, "../../examples/go-payments/system-replicas.yaml")
	dir := t.TempDir()
	f := dir + "/bad.yaml"
	if err := os.WriteFile(f, []byte("name: bad\nsystem: "+sys+"\nsteps:\n  - start: {service: relay, fault: {on: \"broker.reply(XADD)\", do: kill}}\n  - stop: relya\n  - start: {service: relay-2, fault: {on: \"broker.reply(XADD)\", do: kill}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cliEnv(t, nil, "validate", "--offline", f)
	for _, want := range []string{f + ":4:41: start: relay has 2 replicas: arm the fault on one of them: relay-1, relay-2",
		f + `:5:5: stop: no service "relya" in ` + sys + ` (did you mean "relay"?); services: consumer, relay, relay-1, relay-2`} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("validate lacks %q\n%s\n%s", want, out, errOut)
		}
	}
	if code != exitInvalid || strings.Contains(out+errOut, "relay-2 has") {
		t.Errorf("exit %d, want %d, relay-2's fault accepted\n%s\n%s", code, exitInvalid, out, errOut)
	}
}
