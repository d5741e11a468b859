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
