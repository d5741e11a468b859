package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestListSystem: list --system lists the scenarios run --system would
// run with that file applied, and the file's services; a scenario that
// starts a service the file lacks is refused as run refuses it, at its
// file:line:col.
func TestListSystem(t *testing.T) {
	sys := filepath.Join("..", "..", "examples", "go-payments", "system.yaml")
	dir := filepath.Join("..", "..", "examples", "go-payments", "scenarios")
	code, out, errs := run0("list", "--system", sys, "--run", "publishes each payment once", dir)
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{
		`relay-publishes-once.yaml +payments: the relay publishes each payment once +system,payments +redis\n`,
		`(?m)^system .*go-payments/system.yaml \(brokers: redis\)$`,
		`(?m)^SERVICE +RUN +READY +VARIANTS$`,
		`(?m)^consumer +\./run\.sh consumer +log "ready" +-$`,
		`(?m)^relay +\./run\.sh relay +log "ready" +-$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("list --system lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "commit-fails") {
		t.Errorf("--run did not select:\n%s", out)
	}
	// A system file of other brokers: run would skip the scenarios on
	// Redis before they start, and says so; on its broker it runs them.
	kafka := filepath.Join("..", "..", "examples", "python", "system-kafka.yaml")
	kdir := filepath.Join("..", "..", "examples", "python", "kafka-scenarios")
	_, out, _ = run0("list", "--system", kafka, kdir)
	if !regexp.MustCompile(`(?m) redis \(skipped: 1\)$`).MatchString(out) ||
		!strings.Contains(out, "skipped 1: the system file "+kafka+" supports brokers kafka; this run is redis\n") {
		t.Errorf("list --system of a Kafka system on Redis:\n%s", out)
	}
	if _, out, _ = run0("list", "--system", kafka, "--broker", "kafka", kdir); !regexp.MustCompile(`(?m) kafka$`).MatchString(out) || strings.Contains(out, "skipped") {
		t.Errorf("list --system --broker kafka:\n%s", out)
	}
	// A replicated service: each replica its own line, naming its group.
	reps := filepath.Join("..", "..", "examples", "go-payments", "system-replicas.yaml")
	if _, out, _ = run0("list", "--system", reps, filepath.Join(dir, "relays-drain-one-outbox.yaml")); !regexp.MustCompile(`(?m)^relay-2 \(replica 2 of 2: relay\) +\./run\.sh relay `).MatchString(out) {
		t.Errorf("list --system of replicas:\n%s", out)
	}
	// A start of a service the file does not have: refused, as by run.
	bad := scenarioFile(t, "ghost.yaml", "name: ghost\nsteps:\n  - produce\n  - start: ghost\n")
	code, out, errs = run0("list", "--system", sys, bad)
	if code != 2 || out != "" || !strings.Contains(errs, "ghost.yaml:4:") || !strings.Contains(errs, "ghost") {
		t.Errorf("a service the system lacks: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := run0("list", "--system", "nowhere.yaml", dir); code != 2 || !strings.Contains(errs, "nowhere.yaml") {
		t.Errorf("a system file not there: exit %d, stderr %q", code, errs)
	}
}
