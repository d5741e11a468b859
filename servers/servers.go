// Package servers starts throwaway PostgreSQL servers for one run, and is
// what every managed server shares: the lifecycle (Lifecycle, Launch), the
// process tree, leases and clean, a team's services. A broker's own server
// starts beside its adapter (broker/X/Xserver) on these. Each server lives
// in its own temp dir, listens on a free loopback port, runs as a child of
// this process, and is stopped and removed again by Stop.
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
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	ReadyTimeout = 30 * time.Second      // longest a server may take to accept connections
	ReadyPoll    = 10 * time.Millisecond // pause between readiness probes (2 ms: no gain measured)
	readyPeek    = time.Millisecond      // pause between cheap readiness checks (Launch.Ready)
	ProbeTimeout = time.Second           // bound on one readiness probe
	stopGrace    = 10 * time.Second      // time a server gets to shut down cleanly
	waitDelay    = 2 * time.Second       // bound on waiting for a killed child's output pipe
	bindAttempts = 3                     // fresh ports tried when another process wins the port
	logTailLines = 20                    // log lines quoted when a server fails to start
	logTailBytes = 64 << 10              // how far back from the end the tail is looked for
)

// readyFallback is the pause between cheap readiness checks where a change
// of Launch.ReadyDir wakes the check at once: only in case the kernel's
// notice (inotify) is lost.
const readyFallback = 20 * time.Millisecond

// MissingBinaryError says which binary is missing and how to get it.
type MissingBinaryError struct {
	Binary   string   // the missing program(s), e.g. "redis-server"
	Searched []string // where it was looked for: "PATH", directories, globs or file paths
	Hint     string   // how to fix it
	What     string   // what Binary is, for Error ("Redis server binary (redis-server)"); "": Binary
}

func (e *MissingBinaryError) Error() string {
	what := e.What
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

// FindProgram resolves binary (empty: def) on PATH, or as the path it is.
// Missing, the error names what it is (what) and how to get it (hint).
func FindProgram(binary, def, what, hint string) (string, error) {
	if binary == "" {
		binary = def
	}
	path, err := exec.LookPath(binary)
	if err == nil {
		return path, nil
	}
	searched := []string{"PATH"}
	if strings.ContainsRune(binary, filepath.Separator) {
		searched = []string{binary}
	}
	return "", &MissingBinaryError{
		Binary: binary, Searched: searched, Hint: hint,
		What: what + " (" + filepath.Base(binary) + ")",
	}
}

// SystemUser is the credential of the first of names that exists, to run
// a server as when we are root; err lists why none did.
func SystemUser(names ...string) (*syscall.Credential, error) {
	var errs []error
	for _, name := range names {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s user ids: %w", name, err)
		}
		// Groups empty (not NoSetGroups): drop root's supplementary groups too.
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, errors.Join(errs...)
}

// ChownTree gives dir and everything in it to uid:gid.
func ChownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// DialProbe connects to addr for a readiness probe. The connection closes
// when ctx is done: a stranger that won the port may accept and never
// answer, and the clients the probes use honour deadlines at most. stop
// closes it and releases the watch.
func DialProbe(ctx context.Context, addr string) (conn net.Conn, stop func(), err error) {
	var d net.Dialer
	conn, err = d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	unwatch := context.AfterFunc(ctx, func() { conn.Close() })
	return conn, func() { unwatch(); conn.Close() }, nil
}

// IsExecutable reports whether path is a regular file someone may execute.
func IsExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// FreePort asks the kernel for a free loopback port. Another process may take
// it before the server binds it; callers retry on "Address already in use".
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// shmDir is a RAM-backed file system most Linux systems mount. A server's
// dir there costs no disk: copying a PostgreSQL cluster (~1,000 files) and
// CREATE DATABASE (~300 files and fsyncs each) take 5-10× less time than on
// a disk whose journal other processes' fsyncs keep busy. A process-kill
// drill proves the same on both: what a killed server had written is in the
// page cache either way; only a power cut would tell them apart, and no
// scenario pulls the plug.
const shmDir = "/dev/shm"

// minShmFree is the room shmDir must have to be used: a cluster is ~30 MB
// and each database pair of a run ~15 MB. Docker gives containers 64 MB.
const minShmFree = 1 << 30

// TempRoot is the directory the servers make their dirs in: $TMPDIR when
// set (the user chose), else shmDir when it is a tmpfs with room, else the
// system temp dir.
func TempRoot() string {
	if os.Getenv("TMPDIR") != "" {
		return os.TempDir()
	}
	const tmpfsMagic = 0x01021994
	var st syscall.Statfs_t
	if syscall.Statfs(shmDir, &st) == nil && st.Type == tmpfsMagic &&
		st.Bavail*uint64(st.Bsize) >= minShmFree && syscall.Access(shmDir, 2 /* W_OK */) == nil {
		return shmDir
	}
	return os.TempDir()
}

// Child is one started process and the goroutine that reaps it.
type Child struct {
	name   string
	cmd    *exec.Cmd
	done   chan struct{} // closed once the process has exited and been reaped
	err    error         // result of Wait; read only after done is closed
	exitAt time.Time     // when Wait returned; read only after done is closed
}

// NewCmd builds the command for a server process (or its helper, initdb).
// It is the one place child process attributes are set, so a later restart
// or fault injection starts processes exactly like the first start did.
func NewCmd(bin string, args []string, dir string, out io.Writer, cred *syscall.Credential) *exec.Cmd {
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
// is closed once the process is gone. A server's process carries a token of
// its dir's lease in its environment (OwnerEnv), passed on to all it starts.
func startChild(name string, cmd *exec.Cmd, logFile *os.File) (*Child, error) {
	if tok := dirToken(cmd.Dir); tok != "" {
		cmd.Env = withOwner(cmd.Env, tok)
	}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	direct.Lock() // Wait reaps it: the subreaper must not (it waits orphanGrace first)
	direct.pids[cmd.Process.Pid] = true
	direct.Unlock()
	c := &Child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		direct.Lock()
		delete(direct.pids, cmd.Process.Pid)
		direct.Unlock()
		if logFile != nil {
			logFile.Close()
		}
		c.exitAt = time.Now()
		close(c.done)
	}()
	return c, nil
}

// PID is the process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// await sends sig and waits up to grace, or until ctx is done, for the
// process to exit; it reports whether it did. With grace 0 it sends nothing.
func (c *Child) await(ctx context.Context, sig syscall.Signal, grace time.Duration) bool {
	if grace <= 0 {
		return c.Exited()
	}
	_ = c.cmd.Process.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return c.Exited()
}

// Kill SIGKILLs the process and its whole group and returns with it reaped.
// The group also holds helpers the server forked (e.g. Redis's AOF rewrite
// child, initdb's standalone backend), which must not outlive it.
func (c *Child) Kill() {
	members := groupMembers(c.PID())
	_ = syscall.Kill(-c.PID(), syscall.SIGKILL)
	_ = c.cmd.Process.Kill()
	<-c.done
	maps.Copy(members, killGroup(c.PID(), stopGrace))
	removeSysvShm(c.uid(), members)
}

// reapKilled ends a child that killTrees killed with its process group
// and session: it waits for its reaping and removes the SysV shared memory
// that the processes killed (pids) created.
func (c *Child) reapKilled(pids map[int]bool) {
	if !c.Exited() {
		// Its group too, while the unreaped leader holds the group's id:
		// a member a scan missed (a process that could not be read) goes.
		_ = syscall.Kill(-c.PID(), syscall.SIGKILL)
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	removeSysvShm(c.uid(), pids)
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
	for child, p := range snapshot() {
		if p.ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// StartTime is the start time of process pid (with the pid, it names one
// process: a pid reused later has another), and whether it runs (exists
// and is not a zombie); "" when there is no such process.
func StartTime(pid int) (start string, alive bool) {
	p, ok := readProc(pid)
	return p.start, ok && p.alive()
}

// running reports whether pid runs (exists and is not a zombie).
func running(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.alive()
}

// Exited reports whether the child has exited and been reaped.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// uid is the user the child runs as.
func (c *Child) uid() int {
	if cred := c.cmd.SysProcAttr.Credential; cred != nil {
		return int(cred.Uid)
	}
	return os.Geteuid()
}

// groupMembers lists the processes in process group pgid.
func groupMembers(pgid int) map[int]bool {
	members := map[int]bool{pgid: true}
	for pid, p := range snapshot() {
		if p.pgrp == pgid {
			members[pid] = true
		}
	}
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

// LogSize is where the next start attempt's output will begin in path.
func LogSize(path string) int64 {
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

// portTaken are what the servers log when a port they were to listen on is
// taken, lower-cased: PostgreSQL and Redis "Address already in use",
// nats-server Go's "bind: address already in use", the RabbitMQ node
// Erlang's eaddrinuse, and its epmd a sentence of its own.
var portTaken = []string{"address already in use", "eaddrinuse", "there is already a epmd running"}

// LostPortRace reports whether err is a server that could not bind a port
// we picked for it, so new ports are worth a try.
func LostPortRace(err error) bool {
	var se *startError
	if !errors.As(err, &se) {
		return false
	}
	out := strings.ToLower(se.output)
	return slices.ContainsFunc(portTaken, func(m string) bool { return strings.Contains(out, m) })
}
