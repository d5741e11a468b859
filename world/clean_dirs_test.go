package world

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
)

// TestCleanTempDirsJudgesByLease: a live run whose scenario stopped its
// Redis (`broker: stop`) keeps the Redis dir through a clean, however old
// the dir, and its later `start` finds its data; so does a run that holds
// its lease with no server up at all. A dead run's dirs (its lease held by
// nobody, or gone) are removed at once, young or old, its lease file too.
func TestCleanTempDirsJudgesByLease(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // clean sees this test's dirs only
	privateTemp(t, tmp)     // leases are judged there, not in a .drill-leases-UID of it
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := time.Now().Add(-time.Hour)

	// The live run (this process): its Redis stopped by the scenario.
	r, err := redisserver.Start(ctx, redisserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Discard(context.Background())
	if err := os.WriteFile(filepath.Join(r.Dir, "marker"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Halt(ctx); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(r.Dir, old, old)

	// Another live run holding its lease, none of its servers up: the lock
	// alone keeps its dir.
	heldID := "0123abcd"
	held := filepath.Join(tmp, "drill-run-"+heldID+".lease")
	if err := os.WriteFile(held, []byte(`{"lease":"`+heldID+`","pid":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("flock", "-x", held, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	heldDir := filepath.Join(tmp, "drill-pg-"+heldID+"-111")
	mkdirs(t, heldDir)
	_ = os.Chtimes(heldDir, old, old)
	for deadline := time.Now().Add(5 * time.Second); !locked(held) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}

	// Dead runs: a lease file nobody holds (SIGKILLed runner), and dirs whose
	// lease file is gone altogether. Young and old.
	deadID, goneID := "deadbeef", "feedf00d"
	deadLease := filepath.Join(tmp, "drill-run-"+deadID+".lease")
	if err := os.WriteFile(deadLease, []byte(`{"lease":"`+deadID+`","pid":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadOld := filepath.Join(tmp, "drill-redis-"+deadID+"-222")
	deadYoung := filepath.Join(tmp, "drill-pg-"+deadID+"-333")
	goneDir := filepath.Join(tmp, "drill-nats-"+goneID+"-444")
	mkdirs(t, deadOld, deadYoung, goneDir)
	_ = os.Chtimes(deadOld, old, old)

	c, err := CleanTempDirs()
	if err != nil {
		t.Fatal(err)
	}
	removed := c.Removed
	t.Logf("removed %v, live %v", removed, c.Live)
	for _, d := range []string{r.Dir, heldDir, held} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a live run's %s was removed", d)
		}
		if slices.Contains(removed, d) {
			t.Errorf("a live run's %s is listed as removed", d)
		}
	}
	for _, d := range []string{r.Dir, heldDir} {
		if !slices.Contains(c.Live, d) {
			t.Errorf("a live run's %s is not listed as live: %v", d, c.Live)
		}
	}
	for _, d := range []string{deadOld, deadYoung, goneDir, deadLease} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("a dead run's %s is still there", d)
		}
	}
	for _, d := range []string{deadOld, deadYoung, goneDir} {
		if !slices.Contains(removed, d) {
			t.Errorf("a dead run's %s is not listed as removed: %v", d, removed)
		}
	}

	// The scenario's `broker: start` finds its dir and data.
	if err := r.Start(ctx); err != nil {
		t.Fatalf("start after clean: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(r.Dir, "marker")); err != nil || string(b) != "data" {
		t.Errorf("the stopped Redis's dir lost its data: %q, %v", b, err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// A run that ended removed its dirs and its lease: nothing of it is left.
	if left, _ := filepath.Glob(filepath.Join(tmp, "drill-*")); len(left) != 2 || !slices.Contains(left, heldDir) || !slices.Contains(left, held) {
		t.Errorf("after the run ended: %v, want only the other live run's dir and lease", left)
	}
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// locked reports whether some process holds the flock on path.
func locked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// privateTemp makes dir this user's private dir (t.TempDir's is 0755), as
// a $TMPDIR of one's own is: leases are then made and judged in it.
func privateTemp(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

// Dirs of a runner before leases (no run id in their name) are judged as
// they were: older than two minutes, and no process works in them.
func TestCleanTempDirsTakesOnlyDeadOnes(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := filepath.Join(tmp, "drill-pg-123")
	live := filepath.Join(tmp, "drill-redis-456")
	other := filepath.Join(tmp, "someone-else")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil { // as os.MkdirTemp made them
			t.Fatal(err)
		}
	}
	young := filepath.Join(tmp, "drill-pg-789") // being set up right now
	if err := os.Mkdir(young, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{dead, live, other} {
		_ = os.Chtimes(d, old, old)
	}
	cmd := exec.Command("sleep", "30") // a "server" working in the live dir
	cmd.Dir = live
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	c, err := CleanTempDirs()
	if err != nil || len(c.Removed) != 1 || c.Removed[0] != dead {
		t.Fatalf("removed %v, %v; want only %s", c.Removed, err, dead)
	}
	for _, d := range []string{live, other, young} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed", d)
		}
	}
}
