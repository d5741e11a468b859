package servers

import (
	"github.com/outboxdrill/runner/internal/testutil"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// CleanDeadRuns kills what a dead run (its lease file held by nobody)
// left, found by the token in its environment, also in a session of its
// own; a live run's service (this process holds its lease) and its child
// stay, and so does its lease file.
func TestCleanDeadRunsKillsOnlyDeadRuns(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mark := testutil.Mark(1)
	privateTemp(t, tmp) // leases are judged there, not in a .drill-leases-UID of it
	killMarked(t, mark)

	s, err := startSh(t, "sleep "+mark+"1 & echo ready; wait", "ready")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill(t.Context())

	id, secret := "deadbeef", "0123456789abcdef0123456789abcdef"
	lease := filepath.Join(tmp, "drill-run-"+id+".lease")
	if err := os.WriteFile(lease, []byte(`{"lease":"`+id+`","secret":"`+secret+`","pid":1,"start":"1","sid":1}
{"service":"relay","token":"`+tokenPrefix(id, secret)+`1","pid":4194000,"pgid":4194000,"sid":4194000,"start":"1"}
{"service":"cut sh`), 0o600); err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("setsid", "sh", "-c", "exec sleep "+mark+"2")
	orphan.Env = withOwner(nil, tokenPrefix(id, secret)+"1")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	go orphan.Wait()
	for deadline := time.Now().Add(5 * time.Second); len(testutil.Marked(mark)) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(testutil.Marked(mark)); n != 2 {
		t.Fatalf("%d of 2 processes run", n)
	}

	rc, err := CleanDeadRuns([]string{tmp})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %v", rc.Killed)
	if left := testutil.Marked(mark + "2"); len(left) > 0 {
		t.Errorf("the dead run's process %v outlived clean", left)
	}
	if len(rc.Killed) != 1 || !strings.Contains(rc.Killed[0], "(sleep), run "+id) {
		t.Errorf("killed %v, want the dead run's sleep", rc.Killed)
	}
	if len(testutil.Marked(mark+"1")) != 1 {
		t.Error("the live run's service's child was killed")
	}
	if ok, _ := s.Exited(); ok {
		t.Error("the live run's service was killed")
	}
	if _, err := os.Stat(lease); err == nil {
		t.Error("the dead run's lease is still there")
	}
	if m, _ := filepath.Glob(filepath.Join(tmp, "drill-run-*.lease")); len(m) != 1 || !slices.Contains(m, s.lease.path) {
		t.Errorf("leases %v, want the live run's %s", m, s.lease.path)
	}
}

// privateTemp makes dir this user's private dir (t.TempDir's is 0755), as
// a $TMPDIR of one's own is: leases are then made and judged in it.
func privateTemp(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}
