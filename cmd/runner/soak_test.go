package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runner soak is explore's random mode: by default on the reference
// system (the runner's own relay and consumer as processes behind the
// proxies), seeded, its schedule printed, nothing left behind when it
// held; --batch and --baseline belong to --in-process, which keeps the
// in-process engine.
func TestSoakIsExploreRandomOnTheReferenceSystem(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	code, out, errOut := cli(t, "soak", "--events", "40", "--faults", "0.1", "--seed", "3")
	if code != exitOK {
		t.Fatalf("exit %d, want 0:\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"soak ", "/system.yaml: workload ", "random: seed 3, 40 events, fault rate 0.1 per event", "relay (started at", "consumer (started at",
		"random: seed 3, 40 events, "} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`random: seed 3, 40 events, \d+ fault\(s\) \(the same seed draws the same schedule\): held( \(not judged: [a-z_, ]+\))? in`).MatchString(out) {
		t.Errorf("no held verdict of the seeded schedule:\n%s", out)
	}
	// What the soak contract asks it to print: events/s, the faults per
	// kind, and a verdict that names what it did not judge.
	for _, re := range []string{`\n  \d+ events/s over the whole run`, `\n  faults drawn per kind: (consumer|relay) `, `no violation at the points that ran; unbalanced is never judged here`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("want %s in:\n%s", re, out)
		}
	}
	// Its own out dir (other tests may run a soak meanwhile).
	dir := regexp.MustCompile(regexp.QuoteMeta(os.TempDir()) + `/runner-soak-[0-9-]+`).FindString(out)
	if dir == "" {
		t.Errorf("the output names no runner-soak-* dir:\n%s", out)
	} else if _, err := os.Stat(dir); err == nil {
		t.Errorf("a soak that held left %s", dir)
	}
	// With --out, what it wrote replays after it ended: the reference
	// system it drilled is written there too.
	out2 := t.TempDir()
	if code, out, errOut = cli(t, "soak", "--events", "3", "--faults", "0.5", "--seed", "3", "--out", out2); code != exitOK {
		t.Fatalf("soak --out: exit %d:\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut = cli(t, "validate", filepath.Join(out2, "random-seed-3.schedule")); code != exitOK {
		t.Errorf("the schedule a soak wrote does not load after it ended: exit %d:\n%s\n%s", code, out, errOut)
	}
	// The reference system speaks Redis only: another broker is a usage
	// error, not a skip that explored nothing and passed.
	code, _, errOut = cli(t, "soak", "--events", "1", "--broker", "nats")
	if code != exitInvalid || !strings.Contains(errOut, "runner soak: --broker nats: the reference system") {
		t.Errorf("--broker nats on the reference system: exit %d, %s", code, errOut)
	}
	code, _, errOut = cli(t, "soak", "--batch", "5", "--events", "1")
	if code != exitInvalid || !strings.Contains(errOut, "runner soak: --batch: only with --in-process") {
		t.Errorf("--batch without --in-process: exit %d, %s", code, errOut)
	}
	code, out, errOut = cli(t, "soak", "--in-process", "--events", "200", "--faults", "0.1", "--seed", "3", "--batch", "20")
	if code != exitOK || !strings.Contains(out, "soak: 200 events, faults 0.10, seed 3") {
		t.Errorf("--in-process: exit %d:\n%s\n%s", code, out, errOut)
	}
}
