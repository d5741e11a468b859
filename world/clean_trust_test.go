package world

import (
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestCleanTempDirsLeavesLookAlikes (issue 41, M8): clean removed any
// drill-<kind>-* in $TMPDIR older than two minutes, run id or not, files
// too (drill-kafka-2024-archive/, drill-pg-notes.txt). Now it takes only
// the names the runner gives (drill-KIND-RUNID-N, or drill-KIND-N of a
// runner before leases), as a runner makes them: a real directory (never
// through a symlink), mode 0700, this user's. A dead run's dir of that
// shape still goes, in a private $TMPDIR and in a shared one like /tmp.
func TestCleanTempDirsLeavesLookAlikes(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run("shared="+strconv.FormatBool(shared), func(t *testing.T) { lookAlikes(t, shared) })
	}
}

func lookAlikes(t *testing.T, shared bool) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mode := os.FileMode(0o700)
	if shared {
		mode = 0o1777
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	victim := filepath.Join(t.TempDir(), "precious")
	mkdirs(t, victim)
	dir := func(name string, perm os.FileMode) string {
		p := filepath.Join(tmp, name)
		if err := os.Mkdir(p, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keep := []string{
		dir("drill-kafka-2024-archive", 0o700),       // not a shape the runner gives
		dir("drill-nats-deadbeef-2", 0o755),          // not made as the runner makes dirs
		dir("drill-pg-0777", 0o755),                  // a runner before leases made it 0700
		dir("drill-redis-deadbeef-01x", 0o700),       // not the shape: the counter is digits
		filepath.Join(tmp, "drill-pg-notes.txt"),     // a file
		filepath.Join(tmp, "drill-pg-123"),           // a file of a dir's legacy shape
		filepath.Join(tmp, "drill-redis-deadbeef-1"), // a symlink to someone's dir
	}
	for _, f := range keep[4:6] {
		if err := os.WriteFile(f, []byte("notes"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, keep[6]); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 { // another user's dir of the runner's exact shape
		if u, err := user.Lookup("nobody"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			d := dir("drill-nats-deadbeef-3", 0o700)
			if err := os.Lchown(d, uid, -1); err != nil {
				t.Fatal(err)
			}
			keep = append(keep, d)
		}
	}
	dead := dir("drill-kafka-deadbeef-4", 0o700) // a dead run's (its lease gone)
	for _, p := range append(slices.Clone(keep), dead) {
		_ = os.Chtimes(p, old, old)
	}

	c, err := CleanTempDirs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v, refused %v", c.Removed, c.Refused)
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: not the runner's", p)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "data")); err != nil {
		t.Errorf("the symlink's target lost its contents: %v", err)
	}
	if !slices.Equal(c.Removed, []string{dead}) {
		t.Errorf("removed %v, want only the dead run's %s", c.Removed, dead)
	}
}
