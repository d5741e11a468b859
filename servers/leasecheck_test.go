package servers

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// nobody is the uid and gid of the user nobody; the test is skipped when
// not root (only root can plant a file of another user's).
func nobody(t *testing.T) (uid, gid int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: plants files owned by nobody, as another user on the machine would")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// bystander is a process no runner started, in a session of its own (as a
// service's leader is): clean must never signal it.
func bystander(t *testing.T) procInfo {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if p, ok := readProc(cmd.Process.Pid); ok && p.comm == "sleep" {
			return p
		}
	}
	t.Fatal("sleep never ran")
	return procInfo{}
}

// plantLease writes a lease naming p as a service's leader (its pid,
// group, session and start time, as anyone can read them in /proc).
func plantLease(t *testing.T, path, id string, p procInfo, mode os.FileMode, uid int) {
	t.Helper()
	body := `{"lease":"` + id + `","secret":"0123456789abcdef0123456789abcdef","pid":1,"start":"1","sid":1}
{"service":"relay","token":"` + id + `.0123456789abcdef0123456789abcdef.1","pid":` + strconv.Itoa(p.pid) + `,"pgid":` + strconv.Itoa(p.pid) + `,"sid":` + strconv.Itoa(p.pid) + `,"start":"` + p.start + `"}
`
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
}

// TestCleanTrustsOnlyItsOwnLeases (issue 41, H5): a lease written by
// nobody made root's clean kill root processes no runner started, their
// start time matching (anyone can read it). Now clean reads only leases
// this user's runner wrote: in this user's private dir, this user's, mode
// 0600, not a symlink; and kills a recorded leader only if it carries the
// lease's token. Every planted lease below names a bystander; none dies.
func TestCleanTrustsOnlyItsOwnLeases(t *testing.T) {
	nuid, ngid := nobody(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	privateTemp(t, tmp)
	shared := filepath.Join(t.TempDir(), "shared") // as /tmp is: anyone writes there
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}

	victims := map[string]procInfo{}
	plant := func(what, path, id string, mode os.FileMode, uid int) {
		p := bystander(t)
		victims[what] = p
		plantLease(t, path, id, p, mode, uid)
	}
	plant("nobody's lease in a private dir", filepath.Join(tmp, "drill-run-deadbeef.lease"), "deadbeef", 0o600, nuid)
	plant("a lease of mode 0644", filepath.Join(tmp, "drill-run-0badc0de.lease"), "0badc0de", 0o644, 0)
	plant("nobody's lease in a shared dir", filepath.Join(shared, "drill-run-cafebabe.lease"), "cafebabe", 0o600, nuid)
	planted := filepath.Join(shared, leaseDirName()) // nobody made it before any runner did
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(planted, nuid, ngid); err != nil {
		t.Fatal(err)
	}
	plant("a lease in nobody's lease dir", filepath.Join(planted, "drill-run-feedf00d.lease"), "feedf00d", 0o600, 0)
	target := filepath.Join(t.TempDir(), "elsewhere.lease")
	plant("a symlink to a lease", target, "0ddba11s", 0o600, 0)
	if err := os.Symlink(target, filepath.Join(tmp, "drill-run-0ddba11a.lease")); err != nil {
		t.Fatal(err)
	}
	// This user's own lease, right in every way, naming a process by its
	// pid and start time alone: without the token in its environment, the
	// pid is not the service's (it may have been reused).
	plant("a process without the token", filepath.Join(tmp, "drill-run-5ca1ab1e.lease"), "5ca1ab1e", 0o600, 0)

	rc, err := CleanDeadRuns([]string{tmp, shared})
	t.Logf("killed %v, refused %v, err %v", rc.Killed, rc.Refused, err)
	for what, p := range victims {
		if q, ok := readProc(p.pid); !ok || q.start != p.start || !q.alive() {
			t.Errorf("%s: clean killed pid %d (%s), a process no runner started", what, p.pid, p.comm)
		}
	}
	if len(rc.Killed) > 0 {
		t.Errorf("killed %v, want none", rc.Killed)
	}
	for _, p := range []string{filepath.Join(tmp, "drill-run-deadbeef.lease"), filepath.Join(shared, "drill-run-cafebabe.lease"), target} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s, not this user's runner's, was removed", p)
		}
	}
}

// sharedTemp is a temp root anyone may write into, as /tmp is.
func sharedTemp(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLeaseInASharedTempDir: in a temp dir anyone writes into, the lease
// is made 0600 in .drill-leases-UID (0700), with a second name where a
// clean of a runner before private lease dirs looks (held: that clean
// leaves the live run's dirs alone); the run's end removes all three. A
// dead run's lease, both names and its dirs go with clean.
func TestLeaseInASharedTempDir(t *testing.T) {
	shared := sharedTemp(t)
	t.Setenv("TMPDIR", shared)
	dir, err := MakeDir(PostgresDir)
	if err != nil {
		t.Fatal(err)
	}
	l := leases.byDir[dir]
	ldir := filepath.Join(shared, leaseDirName())
	if filepath.Dir(l.path) != ldir {
		t.Errorf("lease %s, want it in %s", l.path, ldir)
	}
	for p, want := range map[string]os.FileMode{ldir: os.ModeDir | 0o700, l.path: 0o600, dir: os.ModeDir | 0o700} {
		if fi, err := os.Lstat(p); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v %v, want mode %v", p, fi.Mode(), err, want)
		}
	}
	compat := filepath.Join(shared, filepath.Base(l.path))
	a, _ := os.Lstat(l.path)
	if b, err := os.Lstat(compat); err != nil || !os.SameFile(a, b) {
		t.Errorf("no second name %s of the lease: %v", compat, err)
	}
	if !leaseHeld(compat) {
		t.Error("the lease's second name is not held")
	}
	os.Remove(dir)
	dropDir(dir)
	if left, _ := filepath.Glob(filepath.Join(shared, "*drill*")); len(left) > 0 {
		t.Errorf("the run ended and left %v", left)
	}
	if _, err := os.Lstat(ldir); err == nil {
		t.Errorf("the emptied %s stays", ldir)
	}

	// A dead run's: its lease (both names) and dir go.
	if err := os.Mkdir(ldir, 0o700); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(ldir, "drill-run-deadbeef.lease")
	if err := os.WriteFile(dead, []byte(`{"lease":"deadbeef","secret":"0123456789abcdef0123456789abcdef","pid":1}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(dead, filepath.Join(shared, "drill-run-deadbeef.lease")); err != nil {
		t.Fatal(err)
	}
	deadDir := filepath.Join(shared, "drill-pg-deadbeef-7") // pg: the kinds this package knows without the brokers
	if err := os.Mkdir(deadDir, 0o700); err != nil {
		t.Fatal(err)
	}
	rc, err := CleanDeadRuns([]string{shared})
	if err != nil || len(rc.Removed) != 1 || rc.Removed[0] != deadDir {
		t.Errorf("removed %v, %v; want %s", rc.Removed, err, deadDir)
	}
	if left, _ := filepath.Glob(filepath.Join(shared, "*drill*", "*")); len(left) > 0 {
		t.Errorf("left %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(shared, "drill-*")); len(left) > 0 {
		t.Errorf("left %v", left)
	}
}
