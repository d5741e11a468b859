package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	paymentsOnce sync.Once
	paymentsBin  string
	paymentsErr  error
)

// paymentsService builds the Go payments example once (its system file runs
// $PAYMENTS_BIN through run.sh).
func paymentsService(t *testing.T) string {
	t.Helper()
	paymentsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "payments-bin-")
		if err != nil {
			paymentsErr = err
			return
		}
		paymentsBin = filepath.Join(dir, "payments")
		out, err := exec.Command("go", "build", "-o", paymentsBin, "../../examples/go-payments").CombinedOutput()
		if err != nil {
			paymentsErr = err
			t.Logf("%s", out)
		}
	})
	if paymentsErr != nil {
		t.Fatal(paymentsErr)
	}
	return paymentsBin
}

// pythonReady reports whether Debian's python3 has psycopg2 and redis (the
// Python example's modules); in CI their absence is a failure.
func pythonReady(t *testing.T) bool {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import psycopg2, redis").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must install the Python example's modules (apt-get install python3-psycopg2 python3-redis)")
		}
		return false
	}
	return true
}

// A foreign service's verdict: each scenario passes on the correct
// service, and fails on a service with one known bug, the history checker
// naming the invariant it breaks. Every scenario declares nothing: the
// checker must find the bug on its own.

func TestForeignServicesVerdicts(t *testing.T) {
	t.Parallel()
	// BUG reaches the services from the runner's environment: each run is
	// a runner process with its own (cliEnv), so the rows run in parallel.
	payments := "PAYMENTS_BIN=" + paymentsService(t)
	const (
		goSys = "../../examples/go-payments/system.yaml"
		// system.yaml plus the order's mapping, which the scenarios about
		// order name (system:); their own directory, so that scenarios/
		// passes with --system system.yaml.
		goOrd   = "../../examples/go-payments/system-ordered.yaml"
		goOrdSc = "../../examples/go-payments/order-scenarios/"
		goSc    = "../../examples/go-payments/scenarios/"
		pySys   = "../../examples/python/system.yaml"
		pySc    = "../../examples/python/scenarios/"
	)
	rows := []struct {
		system, scenario, bug string
		// want are the invariants the checker must name (each: one of
		// a|b), as "invariant: consumer …" lines of the failure.
		want []string
	}{
		{goSys, goSc + "commit-fails-is-retried.yaml", "no-retry", []string{"stranded"}},
		// The consumer's start is the last step: judged from settling alone.
		{goSys, goSc + "commit-fails-as-the-last-step.yaml", "no-retry", []string{"stranded"}},
		{goSys, goSc + "relay-republish-is-deduplicated.yaml", "entry-id-dedupe", []string{"double_applied"}},
		// The proxy's duplicate: a relay's retry at the wire, two entries.
		{goSys, goSc + "relay-publish-duplicated-at-the-wire.yaml", "entry-id-dedupe", []string{"double_applied"}},
		// A delivery handed twice: the upsert applies the known id again.
		{goSys, goSc + "delivery-duplicated.yaml", "upsert", []string{"double_applied", "projection_mismatch"}},
		// The proxy's drop: the relay never learns of its XADD and publishes again.
		{goSys, goSc + "relay-xadd-reply-dropped.yaml", "entry-id-dedupe", []string{"double_applied"}},
		{goSys, goSc + "forged-copy-is-refused.yaml", "upsert", []string{"phantom", "double_applied", "projection_mismatch"}},
		{goSys, goSc + "commit-fails-after-ack.yaml", "ack-first", []string{"lost", "acked_without_effect"}},
		{goSys, goSc + "balance-commit-fails.yaml", "split-tx", []string{"projection_mismatch"}},
		{goSys, goSc + "relay-publishes-once.yaml", "double-publish", []string{"double_published"}},
		{goSys, goSc + "relay-killed-before-xadd.yaml", "mark-first", []string{"lost"}},
		// A refused mark makes the correct relay publish again: at least
		// once, not a double publish; publishing twice in one pass is.
		{goSys, goSc + "mark-fails-publishes-again.yaml", "double-publish", []string{"double_published"}},
		// Per-aggregate order, from the inbox in applied_seq order: a
		// batch applied last entry first, and a version never applied
		// under one applied (the correct twin declares its out_of_order:
		// it applies a retried version after the next).
		{goOrd, goOrdSc + "versions-applied-in-order.yaml", "out-of-order", []string{"out_of_order"}},
		{goOrd, goOrdSc + "version-2-commit-fails.yaml", "no-retry", []string{"gap", "stranded"}},
		{pySys, pySc + "commit-fails.yaml", "no-retry", []string{"stranded"}},
		{pySys, pySc + "commit-fails.yaml", "ack-first", []string{"lost", "acked_without_effect"}},
		// Progress: a consumer that stops making it fails, whatever the
		// state it stopped in (each correct twin passes the same steps).
		{pySys, pySc + "consumer-db-cut.yaml", "no-reconnect", []string{"stuck"}},
		{pySys, pySc + "first-read-fails.yaml", "dead-thread", []string{"stuck"}},
		{pySys, pySc + "poison-is-dead-lettered.yaml", "no-dead-letter", []string{"stuck"}},
	}
	python := pythonReady(t)
	// The correct service's run of each system + scenario, once: the rows
	// that share one wait for it.
	type correctRun struct {
		once      sync.Once
		code      int
		out, errs string
	}
	var mu sync.Mutex
	correct := map[string]*correctRun{}
	for _, r := range rows {
		name := filepath.Base(filepath.Dir(r.system)) + "/" + strings.TrimSuffix(filepath.Base(r.scenario), ".yaml") + "/BUG=" + r.bug
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if r.system == pySys && !python {
				t.Skip("/usr/bin/python3 lacks psycopg2 or redis: apt-get install python3-psycopg2 python3-redis")
			}
			mu.Lock()
			c := correct[r.system+" "+r.scenario]
			if c == nil {
				c = &correctRun{}
				correct[r.system+" "+r.scenario] = c
			}
			mu.Unlock()
			c.once.Do(func() {
				c.code, c.out, c.errs = cliEnv(t, []string{payments, "BUG="}, "run", "--system", r.system, r.scenario)
			})
			if c.code != exitOK {
				t.Fatalf("the correct service: exit %d, want 0\n%s\n%s", c.code, c.out, c.errs)
			}
			code, out, errOut := cliEnv(t, []string{payments, "BUG=" + r.bug}, "run", "--system", r.system, withinCut(t, r.scenario, 2*time.Second))
			if code != exitFailed {
				t.Fatalf("BUG=%s: exit %d, want 1\n%s\n%s", r.bug, code, out, errOut)
			}
			named := namedInvariants(out)
			for _, want := range r.want {
				if !anyOf(named, strings.Split(want, "|")) {
					t.Errorf("BUG=%s: the checker named %v, want %s\n%s", r.bug, named, want, out)
				}
			}
			// An order verdict names the aggregate and its versions, with
			// their events, in the consumer's apply order.
			for inv, w := range map[string]string{
				"out_of_order": "aggregate acct-1: applied in the order version 3 (bus-3), version 2 (bus-2), version 1 (bus-1)",
				"gap":          "aggregate acct-1: version 3 (bus-3) applied, but version 2 (bus-2), an earlier version, never was",
			} {
				if slices.Contains(r.want, inv) && !strings.Contains(out, w) {
					t.Errorf("BUG=%s: the %s verdict lacks %q\n%s", r.bug, inv, w, out)
				}
			}
			// A stuck verdict carries its witness: how long the consumer
			// ran and what it last said.
			for _, w := range []string{"ran for the whole settle", "its last lines: ", "consumer_db: "} {
				if slices.Contains(r.want, "stuck") && !strings.Contains(out, w) {
					t.Errorf("BUG=%s: the stuck verdict lacks %q\n%s", r.bug, w, out)
				}
			}
		})
	}
}

// violationLine is a history failure's first line: "stranded: consumer
// accounting, event bus-1: …" (indented under its FAIL line).
var violationLine = regexp.MustCompile(`(?m)^\s+([a-z_]+): (consumer |event |read model )`)

// namedInvariants are the invariants a run's history failures name.
func namedInvariants(out string) []string {
	var names []string
	for _, m := range violationLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	return names
}

func anyOf(have, want []string) bool {
	return slices.ContainsFunc(want, func(w string) bool { return slices.Contains(have, w) })
}
