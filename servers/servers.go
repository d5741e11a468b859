// Package servers starts throwaway PostgreSQL and Redis servers for one test
// run. Each server lives in its own temp dir, listens on a free loopback port,
// runs as a child of this process, and is stopped and removed again by Stop.
//
// Children are put in their own process group, so a Ctrl-C typed in the
// terminal reaches only the runner, which then stops them in order; and they
// get SIGKILL from the kernel if the runner itself dies without stopping them.
package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	readyTimeout = 30 * time.Second         // longest a server may take to accept connections
	readyPoll    = 10 * time.Millisecond    // pause between readiness probes
	probeTimeout = time.Second              // bound on one readiness probe
	stopGrace    = 10 * time.Second         // time a server gets to shut down cleanly
	waitDelay    = 2 * time.Second          // bound on waiting for a killed child's output pipe
	bindAttempts = 3                        // fresh ports tried when another process wins the port
	logTailLines = 20                       // log lines quoted when a server fails to start
	logTailBytes = 64 << 10                 // how far back from the end the tail is looked for
	addrInUse    = "Address already in use" // what both servers log when bind fails
)

// MissingBinaryError says which binary is missing and how to get it.
type MissingBinaryError struct {
	Binary   string   // the missing program(s), e.g. "redis-server"
	Searched []string // where it was looked for: "PATH", directories, globs or file paths
	Hint     string   // how to fix it

	what string // human description of Binary, used by Error when set
}

func (e *MissingBinaryError) Error() string {
	what := e.what
	if what == "" {
		what = e.Binary
	}
	places := make([]string, len(e.Searched))
	for i, s := range e.Searched {
		switch {
		case s == "PATH":
			places[i] = "on PATH"
		case filepath.Base(s) == filepath.Base(e.Binary):
			places[i] = "at " + s // a path to the binary itself
		default:
			places[i] = "in " + s
		}
	}
	return fmt.Sprintf("%s not found %s: %s", what, strings.Join(places, " or "), e.Hint)
}

// isExecutable reports whether path is a regular file someone may execute.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before the server binds it; callers retry on "Address already in use".
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// child is one started process and the goroutine that reaps it.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // result of Wait; read only after done is closed
}

// newCmd builds the command for a server process (or its helper, initdb).
// It is the one place child process attributes are set, so a later restart
// or fault injection starts processes exactly like the first start did.
func newCmd(bin string, args []string, dir string, out io.Writer, cred *syscall.Credential) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir // the server user may not be allowed into our working directory
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal Ctrl-C goes to the runner only, which
		// stops the servers in order instead of having them die mid-run.
		Setpgid: true,
		// Die with the runner if it is SIGKILLed. The kernel ties this to the
		// OS thread that forked, which Go keeps alive unless a goroutine ends
		// while locked to it (runtime.LockOSThread): never start servers from
		// such a goroutine.
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	// If backends outlive a killed server they keep the output pipe open;
	// don't let that block Wait forever.
	cmd.WaitDelay = waitDelay
	return cmd
}

// startChild starts cmd and reaps it in the background. logFile, if not nil,
// is closed once the process is gone.
func startChild(name string, cmd *exec.Cmd, logFile *os.File) (*child, error) {
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// process is the bookkeeping every managed server embeds: its running child
// and the once that Stop and Discard share. A server guards its own
// launch-time state (ports, URL) with mu too, so Start reads the ports
// together with whether the child runs.
type process struct {
	mu       sync.Mutex
	proc     *child // nil while the server is down
	stopOnce sync.Once
	stopErr  error
}

// pid is the process id of the running child, 0 while it is down.
func (pr *process) pid() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.proc == nil {
		return 0
	}
	return pr.proc.pid()
}

// current is the running child (nil if none), which stays recorded.
func (pr *process) current() *child {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.proc
}

// take swaps the running child out (nil if none): the caller stops it, and
// Start launches a new one.
func (pr *process) take() *child {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	c := pr.proc
	pr.proc = nil
	return c
}

// set records c as the running child, and update records under the same
// lock what c was launched with.
func (pr *process) set(c *child, update func()) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.proc = c
	update()
}

// once runs fn for the first Stop or Discard; every call returns its result,
// concurrent ones after waiting for it.
func (pr *process) once(fn func() error) error {
	pr.stopOnce.Do(func() { pr.stopErr = fn() })
	return pr.stopErr
}

// relaunch launches a server that is down again on the ports it last ran on
// (*ports, guarded by pr.mu); it does nothing while the server runs.
func relaunch[P any](ctx context.Context, pr *process, ports *P, launch func(context.Context, P) error) error {
	pr.mu.Lock()
	up, p := pr.proc != nil, *ports
	pr.mu.Unlock()
	if up {
		return nil
	}
	return launch(ctx, p)
}

// stop sends sig and waits for the process to exit for up to grace, or until
// ctx is done; then it SIGKILLs the whole process group. It reports whether
// the kill was needed. It always returns with the process reaped.
func (c *child) stop(ctx context.Context, sig syscall.Signal, grace time.Duration) (killed bool) {
	select {
	case <-c.done:
		return false
	default:
	}
	if grace > 0 {
		_ = c.cmd.Process.Signal(sig)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-c.done:
			return false
		case <-t.C:
		case <-ctx.Done():
		}
	}
	// The group also holds helpers the server forked (e.g. Redis's AOF
	// rewrite child, initdb's standalone backend), which must not outlive it.
	members := groupMembers(c.pid())
	_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
	_ = c.cmd.Process.Kill()
	<-c.done
	maps.Copy(members, killGroup(c.pid(), stopGrace))
	removeSysvShm(c.uid(), members)
	return true
}

// killGroup SIGKILLs process group pgid until no member is alive (zombies
// count as dead), at most limit, and returns the members it saw. A child
// forked while the first SIGKILL went out escapes it, and a server started
// again on the same data dir while such a backend is still attached to the
// old shared memory refuses to run.
func killGroup(pgid int, limit time.Duration) map[int]bool {
	seen := map[int]bool{}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		live := false
		for pid := range groupMembers(pgid) {
			seen[pid] = true
			// The leader is reaped: its pid may already be someone else's.
			live = live || pid != pgid && running(pid)
		}
		if !live {
			break
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return seen
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	eachProcess(func(child int, st procStat) {
		if st.ppid == strconv.Itoa(pid) {
			out = append(out, child)
		}
	})
	return out
}

// running reports whether pid runs (exists and is not a zombie).
func running(pid int) bool {
	st, ok := readStat(strconv.Itoa(pid))
	return ok && st.alive()
}

// procStat is what /proc/PID/stat says of a process that we use.
type procStat struct {
	state, ppid, pgrp string
	start             string // start time: with the pid, names one process
}

// alive is neither gone nor a zombie.
func (st procStat) alive() bool { return st.state != "Z" && st.state != "X" }

// readStat parses /proc/PID/stat: "pid (comm) state ppid pgrp ... starttime
// ...", where comm may hold spaces and ')'.
func readStat(pid string) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 20 {
		return procStat{}, false
	}
	return procStat{state: f[0], ppid: f[1], pgrp: f[2], start: f[19]}, true
}

// eachProcess calls fn for every process /proc lists.
func eachProcess(fn func(pid int, st procStat)) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(e.Name()); ok {
			fn(pid, st)
		}
	}
}

// exited reports whether the child has exited and been reaped.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// uid is the user the child runs as.
func (c *child) uid() int {
	if cred := c.cmd.SysProcAttr.Credential; cred != nil {
		return int(cred.Uid)
	}
	return os.Geteuid()
}

// groupMembers lists the processes in process group pgid.
func groupMembers(pgid int) map[int]bool {
	members := map[int]bool{pgid: true}
	eachProcess(func(pid int, st procStat) {
		if st.pgrp == strconv.Itoa(pgid) {
			members[pid] = true
		}
	})
	return members
}

// removeSysvShm removes the SysV shared memory segments that the killed
// processes created. A killed postmaster (or initdb's standalone backend)
// leaves its segment behind, and nothing else removes it once its data dir
// is gone. IPC_RMID only marks a segment: the kernel frees it when the last
// process still attached (an exiting backend) detaches.
func removeSysvShm(uid int, creators map[int]bool) {
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return
	}
	const ipcRmid = 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// key shmid perms size cpid lpid nattch uid gid cuid ...
		f := strings.Fields(line)
		if len(f) < 10 || f[9] != strconv.Itoa(uid) {
			continue
		}
		id, err1 := strconv.Atoi(f[1])
		cpid, err2 := strconv.Atoi(f[4])
		if err1 == nil && err2 == nil && creators[cpid] {
			_, _, _ = syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcRmid, 0)
		}
	}
}

// openLog opens path for appending. O_APPEND lets the server (Redis writes
// its own --logfile) and our redirected stdout share one file safely. If echo
// is set, output is copied there too.
func openLog(path string, echo io.Writer) (*os.File, io.Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if echo == nil {
		return f, f, nil
	}
	return f, io.MultiWriter(f, echo), nil
}

// logSize is where the next start attempt's output will begin in path.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns what was appended to path from offset on (at most
// logTailBytes of it, the end).
func logSince(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	offset = max(offset, fi.Size()-logTailBytes)
	if _, err := f.Seek(max(offset, 0), io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startError is a process that exited while starting a server, with what it
// logged. The log file itself is gone by the time the caller sees the error:
// a failed start removes its dir.
type startError struct {
	what    string // e.g. "initdb failed", "postgres exited while starting"
	logPath string
	exit    error
	output  string // log output of this start attempt
}

func (e *startError) Error() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s (%v)", e.what, e.exit)
	if tail := lastLines(e.output, logTailLines); strings.TrimSpace(tail) != "" {
		fmt.Fprintf(&b, "; last lines of %s:\n%s", filepath.Base(e.logPath), tail)
	}
	return b.String()
}

// lostPortRace reports whether err is a server that could not bind the port
// we picked for it, so a new port is worth a try.
func lostPortRace(err error) bool {
	var se *startError
	return errors.As(err, &se) && strings.Contains(se.output, addrInUse)
}

// waitReady polls probe until it succeeds, the child exits, ctx is done or
// readyTimeout passes. A probe in flight is cancelled when the child exits:
// a stranger that won the port may accept connections and never answer.
func waitReady(ctx context.Context, c *child, logPath string, logOffset int64, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
		case <-t.C:
			pctx, pcancel := context.WithTimeout(ctx, probeTimeout)
			last = probe(pctx)
			pcancel()
			if last == nil {
				return nil
			}
			t.Reset(readyPoll)
			continue
		}
		select {
		case <-c.done:
			return &startError{what: c.name + " exited while starting", logPath: logPath, exit: c.err, output: logSince(logPath, logOffset)}
		default:
			return fmt.Errorf("%s did not accept connections (%w); last probe error: %v", c.name, context.Cause(ctx), last)
		}
	}
}
