package servers

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
)

// A process's tokens are read once per process image: an exec with
// another environment (same pid, same start time) is read anew, and a
// process gone leaves the cache at the next scan.
func TestTokensOfFollowsExec(t *testing.T) {
	cmd := exec.Command("sh", "-c", `read x; exec env `+OwnerEnv+`="tok-b" sleep 30`)
	cmd.Env = append(os.Environ(), OwnerEnv+"=tok-a")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	var before procInfo
	if !testutil.Eventually(func() bool { before, _ = readProc(pid); return before.comm == "sh" && before.env[1] != 0 }) {
		t.Fatalf("no sh: %+v", before)
	}
	if tok := tokensOf(before); !slices.Equal(tok, []string{"tok-a"}) {
		t.Fatalf("before the exec: tokens %q, want tok-a", tok)
	}
	_, _ = in.Write([]byte("go\n"))
	var after procInfo
	if !testutil.Eventually(func() bool { after, _ = readProc(pid); return after.comm == "sleep" && after.env[1] != 0 }) {
		t.Fatalf("no exec: %+v", after)
	}
	if after.start != before.start || !after.envKnown || after.env == before.env {
		t.Fatalf("the exec shows no new environment: before %+v, after %+v", before, after)
	}
	if tok := tokensOf(after); !slices.Equal(tok, []string{"tok-b"}) {
		t.Errorf("after the exec: tokens %q, want tok-b", tok)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	snapshot()
	tokenCache.mu.Lock()
	_, kept := tokenCache.m[pid]
	tokenCache.mu.Unlock()
	if kept {
		t.Errorf("pid %d gone, still cached", pid)
	}
}

// An environment larger than the first buffer is read whole: the token
// after 20 KB of other variables is found.
func TestOwnerTokensInALargeEnvironment(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "BIG="+strings.Repeat("x", 20<<10), OwnerEnv+"=tok-c")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var p procInfo
	if !testutil.Eventually(func() bool { p, _ = readProc(cmd.Process.Pid); return p.comm == "sleep" && p.env[1] != 0 }) {
		t.Fatalf("no sleep: %+v", p)
	}
	if tok, ok := ownerTokens(p.pid); !ok || !slices.Equal(tok, []string{"tok-c"}) {
		t.Errorf("tokens %q (read: %v), want tok-c", tok, ok)
	}
}

// An orphan that re-parented here and died is reaped by the subreaper
// once it has been a zombie for orphanGrace, with no kill to reap it.
func TestSubreaperReapsOrphans(t *testing.T) {
	if !becomeSubreaper() {
		t.Skip("not a child subreaper")
	}
	// The grandchild prints its pid, outlives sh (re-parents here) and
	// exits; Output returns once it closes its stdout, as it exits.
	out, err := exec.Command("sh", "-c", `setsid sh -c 'echo $$; exec sleep 0.2' &`).Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	testutil.Eventually(func() bool { p, ok := readProc(pid); return !ok || !p.alive() }) // closing its stdout, it exits
	if p, ok := readProc(pid); !ok || p.ppid != os.Getpid() || p.alive() {
		t.Fatalf("pid %d is not a zombie child of this process: %+v (found: %v)", pid, p, ok)
	}
	deadline := time.Now().Add(5 * orphanGrace)
	for _, there := readProc(pid); there && time.Now().Before(deadline); _, there = readProc(pid) {
		time.Sleep(20 * time.Millisecond)
	}
	if p, there := readProc(pid); there {
		t.Errorf("zombie %+v not reaped within %s", p, 5*orphanGrace)
	}
}

// Without a pidfd (a seccomp profile answering pidfd_open with EPERM, a
// process at its fd limit), a signal still goes, by pid, to the process
// that was scanned, and never to another that took its pid.
func TestSignalWithoutAPidfd(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	p, ok := readProc(cmd.Process.Pid)
	if !ok {
		t.Fatal("no stat for the sleep")
	}
	other := p
	other.start += "0" // as if the pid were another process's now
	signalHeld(other, -1, syscall.SIGKILL)
	select {
	case err := <-done:
		t.Fatalf("a process of another start time was signalled: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	signalHeld(p, -1, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the scanned process was not signalled without a pidfd")
	}
}
