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

// runner soak --in-process is a random schedule of the reference steps
// run by the runner: a soak of an anti-pattern (--with) breaks an
// invariant, its schedule is shrunk and written to --out, and runner run
// of the written file fails the same way. Without --out a violation's
// directory is kept and named; a --with the language refuses is a usage
// error.
func TestSoakInProcessWritesWhatRunReproduces(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	code, stdout, stderr := cli(t, "soak", "--in-process", "--events", "40", "--faults", "0.3", "--seed", "4", "--parallel", "1", "--batch", "10",
		"--with", "consume(dedupe=entry_id)", "--out", out)
	if code != exitFailed || !strings.Contains(stdout, "VIOLATION") || !strings.Contains(stdout, "finding      soak --in-process --seed 4 breaks double_applied") {
		t.Fatalf("exit %d, want 1 with a finding:\n%s\n%s", code, stdout, stderr)
	}
	file := filepath.Join(out, "soak-seed-4.yaml")
	if !strings.Contains(stdout, "runner run "+file+"\n") {
		t.Errorf("the output does not name %s:\n%s", file, stdout)
	}
	code, stdout, stderr = cli(t, "run", file)
	if code != exitFailed || !strings.Contains(stdout, "double_applied: event e-") {
		t.Errorf("runner run %s: exit %d, want 1 with double_applied:\n%s\n%s", file, code, stdout, stderr)
	}
	code, _, stderr = cli(t, "soak", "--in-process", "--events", "20", "--faults", "0.3", "--seed", "4", "--parallel", "1", "--batch", "10",
		"--with", "consume(dedupe=entry_id)")
	dir := regexp.MustCompile(`the findings are in (\S+)`).FindStringSubmatch(stderr)
	if code != exitFailed || dir == nil {
		t.Fatalf("without --out: exit %d, no findings directory named:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir[1], "soak-seed-4.yaml")); err != nil {
		t.Error(err)
	}
	os.RemoveAll(dir[1])
	// --out is never written through a symlink: the directory (a usage
	// error) or the finding's name in it (the run ends with the error
	// after its verdict).
	dirLink := filepath.Join(t.TempDir(), "out")
	if err := os.Symlink(t.TempDir(), dirLink); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli(t, "soak", "--in-process", "--events", "1", "--out", dirLink)
	if code != exitInvalid || !strings.Contains(stderr, "--out: "+dirLink+" is a symbolic link") {
		t.Errorf("--in-process --out a symlink: exit %d, %q", code, stderr)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	out2 := t.TempDir()
	if err := os.Symlink(victim, filepath.Join(out2, "soak-seed-4.yaml")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cli(t, "soak", "--in-process", "--events", "20", "--faults", "0.3", "--seed", "4", "--parallel", "1", "--batch", "10",
		"--with", "consume(dedupe=entry_id)", "--out", out2)
	if b, _ := os.ReadFile(victim); string(b) != "precious" || code != exitEnvironment || !strings.Contains(stderr, "is a symbolic link") || !strings.Contains(stdout, "VIOLATION") {
		t.Errorf("a symlink where the finding goes: exit %d, target %q:\n%s\n%s", code, b, stdout, stderr)
	}
	code, _, stderr = cli(t, "soak", "--in-process", "--events", "1", "--with", "consume(dedup=entry_id)")
	if code != exitInvalid || !strings.Contains(stderr, `--with "consume(dedup=entry_id)": unknown parameter "dedup" (did you mean "dedupe"?)`) {
		t.Errorf("a misspelt --with: exit %d, %s", code, stderr)
	}
	code, _, stderr = cli(t, "soak", "--events", "1", "--with", "consume(dedupe=entry_id)", "--crash")
	if code != exitInvalid || !strings.Contains(stderr, "runner soak: --crash, --with: only with --in-process") {
		t.Errorf("--with and --crash without --in-process: exit %d, %s", code, stderr)
	}
	// Crashes kill the runner's own servers: the tests' are given
	// (RUNNER_PG_URL, RUNNER_REDIS_URL).
	code, _, stderr = cli(t, "soak", "--in-process", "--events", "1", "--crash")
	if code != exitInvalid || !strings.Contains(stderr, "runner soak: crash: the crashes kill the runner's own servers") {
		t.Errorf("--crash on given servers: exit %d, %s", code, stderr)
	}
}
