package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
)

// runProcs sorts the live processes of a run whose servers' dirs are in
// tmp and whose system file is in tmp/sys by kind: its servers (postgres,
// redis-server: they work in their dirs), its services' own processes
// (they work in tmp/sys) and what those started (the sleeps carrying mark).
// By what any runner's processes show, leases or not.
func runProcs(tmp, mark string) map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		i := strings.LastIndexByte(string(st), ')')
		if err != nil || i < 0 || i+2 >= len(st) || st[i+2] == 'Z' {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd")
		comm := string(st[strings.IndexByte(string(st), '(')+1 : i])
		switch {
		case strings.Contains(string(cmd), "\x00"+mark):
			out["grandchildren"] = append(out["grandchildren"], pid)
		case (comm == "postgres" || comm == "redis-server") && strings.HasPrefix(cwd, tmp+"/drill-"):
			out[comm] = append(out[comm], pid)
		case cwd == filepath.Join(tmp, "sys"):
			out["services"] = append(out["services"], pid)
		}
	}
	return out
}

// TestKillRunnerThenCleanTakesItsProcesses SIGKILLs a runner (the built
// binary) mid-scenario while its service runs with a forked child and a
// grandchild it double-forked and setsid's: the kernel takes the runner's
// direct children (servers, the service's own process), not those two.
// `runner clean` then kills them, found from the run's lease, and removes
// the run's server dirs and lease.
func TestKillRunnerThenCleanTakesItsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := runnerBin(t)
	// The servers' user (postgres, when root) must get into their dirs.
	tmp, err := os.MkdirTemp("", "leftovers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := testutil.Mark(1)
	t.Cleanup(func() { // whatever this test failed to see go
		for _, pids := range runProcs(tmp, mark) {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	svc := fmt.Sprintf(`sleep %s1 & ( setsid sh -c 'exec sleep %s2' </dev/null >/dev/null 2>&1 & ); echo ready; wait`, mark, mark)
	if err := os.Mkdir(filepath.Join(tmp, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	sys := onReferenceSchemas(t, filepath.Join(tmp, "sys"), "  daemon: {run: [sh, -c, \""+svc+"\"], ready: {log: ready}}\n")
	f := scenarioFile(t, "hang.yaml", "name: hang\nsystem: "+sys+"\nsteps:\n  - start: daemon\n  - expect: {inbox.rows: 1, within: 1m}\n")
	// The runner's own servers, their dirs and lease in tmp.
	env := ownEnv(tmp)
	cmd, out := startRunner(t, bin, env, "run", f)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var during map[string][]int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		during = runProcs(tmp, mark)
		if len(during["grandchildren"]) == 2 {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the runner exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service's child and grandchild never ran: %v\n%s", during, out.String())
		}
	}
	id := "?"
	// The lease is in tmp's .drill-leases-UID: tmp is not private (0755).
	if m, _ := filepath.Glob(filepath.Join(tmp, ".drill-leases-*", "drill-run-*.lease")); len(m) == 1 {
		id = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m[0]), "drill-run-"), ".lease")
	}
	t.Logf("run %s, running: %v", id, counts(during))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	// The kernel takes the runner's direct children (Pdeathsig), not what
	// they started.
	var after map[string][]int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = runProcs(tmp, mark)
		if len(after["postgres"])+len(after["redis-server"])+len(after["services"]) == 0 || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after the SIGKILL: %v", counts(after))
	if len(after["grandchildren"]) != 2 {
		t.Fatalf("the service's child and grandchild did not survive the runner: the test proves nothing\n%s", out.String())
	}

	clean := exec.Command(bin, "clean")
	clean.Env = env
	stdout, err := clean.CombinedOutput()
	if err != nil {
		t.Fatalf("clean: %v\n%s", err, stdout)
	}
	left := runProcs(tmp, mark)
	t.Logf("after clean: %v\n%s", counts(left), stdout)
	if len(left) > 0 {
		t.Errorf("the killed run's processes %v outlived clean", left)
	}
	for _, pid := range after["grandchildren"] {
		if !strings.Contains(string(stdout), fmt.Sprintf("killed pid %d (sleep), run %s", pid, id)) {
			t.Errorf("clean does not say it killed %d:\n%s", pid, stdout)
		}
	}
	if rest, _ := filepath.Glob(filepath.Join(tmp, "drill-*")); len(rest) > 0 {
		t.Errorf("the killed run's dirs and lease outlived clean: %v", rest)
	}
}

// counts are how many processes of each kind.
func counts(procs map[string][]int) map[string]int {
	out := map[string]int{}
	for _, k := range []string{"postgres", "redis-server", "services", "grandchildren"} {
		out[k] = len(procs[k])
	}
	return out
}

// ownEnv is this process's environment for a runner whose own servers,
// their dirs and lease go in tmp: no RUNNER_ server URL, no run's owner
// token (the runner would pass it on to what it starts), TMPDIR=tmp.
func ownEnv(tmp string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RUNNER_") && !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "OUTBOXDRILL_OWNER=") {
			env = append(env, kv)
		}
	}
	return append(env, "TMPDIR="+tmp)
}

// startRunner starts bin with args and env, its output in out; it is
// killed when the test ends.
func startRunner(t *testing.T, bin string, env []string, args ...string) (*exec.Cmd, *testutil.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out
}
