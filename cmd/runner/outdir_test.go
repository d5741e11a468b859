package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestSoakOutRefusesSymlinks (issue 41, M7): soak and explore --out
// followed a symlink planted under a name they write and overwrote its
// target (exit 0). Now the write is refused, the target untouched, the run
// ends with the error (exit 3) after its summary line, verdict included;
// an --out that is itself a symlink is a usage error.
func TestSoakOutRefusesSymlinks(t *testing.T) {
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	out := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(out, "random-seed-3.schedule")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(t, "soak", "--events", "3", "--faults", "0.5", "--seed", "3", "--out", out)
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the symlink's target was overwritten (exit %d)", code)
	}
	if code != exitEnvironment || !strings.Contains(stderr, link+" is a symbolic link") {
		t.Errorf("exit %d, stderr %q; want 3 and the symlink refused", code, stderr)
	}
	if !strings.Contains(stdout, "random: seed 3, 3 events") || !strings.Contains(stdout, ": not run: the schedule could not be written") {
		t.Errorf("the summary line lacks its verdict:\n%s", stdout)
	}

	dirLink := filepath.Join(t.TempDir(), "out")
	if err := os.Symlink(t.TempDir(), dirLink); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli(t, "soak", "--events", "3", "--out", dirLink)
	if code != exitInvalid || !strings.Contains(stderr, "--out: "+dirLink+" is a symbolic link") {
		t.Errorf("--out a symlink: exit %d, %q", code, stderr)
	}
}

// TestSoakOutOnAFullDisk (issue 41, L4): a full disk under --out lost the
// summary line's verdict and left a 0-byte schedule (exit 3). Now the
// error ends the run (exit 3) after the summary line, verdict included,
// and no schedule is left, empty or cut short.
func TestSoakOutOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a small tmpfs as the full disk")
	}
	out := t.TempDir()
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", out).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, b)
	}
	t.Cleanup(func() { _ = syscall.Unmount(out, syscall.MNT_DETACH) })
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	// The reference system fits; 20,000 events' schedule (~1 MB) does not.
	code, stdout, stderr := cli(t, "soak", "--events", "20000", "--faults", "0.001", "--seed", "3", "--out", out)
	sched := filepath.Join(out, "random-seed-3.schedule")
	if code != exitEnvironment || !strings.Contains(stderr, "write "+sched+": ") || !strings.Contains(stderr, "no space left on device") {
		t.Errorf("exit %d, stderr %q; want 3 and the write's error", code, stderr)
	}
	if !strings.Contains(stdout, "random: seed 3, 20000 events") || !strings.Contains(stdout, ": not run: the schedule could not be written") {
		t.Errorf("the summary line lacks its verdict:\n%s", stdout)
	}
	if left, _ := filepath.Glob(filepath.Join(out, "*.schedule*")); len(left) > 0 {
		t.Errorf("left %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(out, ".*.tmp")); len(left) > 0 {
		t.Errorf("left %v", left)
	}
}
