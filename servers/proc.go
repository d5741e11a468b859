package servers

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Reading /proc is most of what a kill costs: a scan reads the stat of
// every process on the machine (hundreds, with the PostgreSQL backends of
// parallel runs), and a /proc file costs several slow system calls. So a
// file is read with one open, read and close into a reused buffer, not
// os.ReadFile's six calls; a scan keeps each stat open for the next
// (statFDs); and what a process's environment says is read once per
// process image (tokenCache), not once per scan.

// procInfo is one process as /proc/PID/stat shows it.
type procInfo struct {
	pid, ppid, pgrp, session int
	state, start, comm       string
	// env is where its environment lies in its memory (env_start and
	// env_end): an exec moves it; zero where the environment cannot be
	// read (a kernel thread, a zombie, another user's process) or the
	// kernel does not say (before Linux 3.5: envKnown false).
	env      [2]uint64
	envKnown bool
}

func (p procInfo) alive() bool { return p.state != "Z" && p.state != "X" }

// procBufs are the buffers /proc files are read into.
var procBufs = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// readProcFile calls use with the content of /proc/NAME (read whole, in
// as many reads as it takes), or returns false if it cannot be read.
func readProcFile(name string, use func([]byte)) bool {
	fd, err := unix.Open("/proc/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	bp := procBufs.Get().(*[]byte)
	defer procBufs.Put(bp)
	b, n := *bp, 0
	for {
		if n == len(b) {
			b = slices.Grow(b, len(b))[:2*len(b)]
			*bp = b
		}
		m, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if m == 0 {
			break
		}
		n += m
	}
	use(b[:n])
	return true
}

// readProc reads /proc/PID/stat.
func readProc(pid int) (p procInfo, ok bool) {
	readProcFile(strconv.Itoa(pid)+"/stat", func(b []byte) { p, ok = parseStat(pid, string(b)) })
	return p, ok
}

// parseStat parses a /proc/PID/stat: "pid (comm) state ppid pgrp session
// ...", where comm may hold spaces and ')'.
func parseStat(pid int, s string) (procInfo, bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procInfo{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 20 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, comm: s[open+1 : end], state: f[0], start: f[19]}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgrp, _ = strconv.Atoi(f[2])
	p.session, _ = strconv.Atoi(f[3])
	if len(f) > 48 { // fields 50 and 51 of the line
		var err1, err2 error
		p.env[0], err1 = strconv.ParseUint(f[47], 10, 64)
		p.env[1], err2 = strconv.ParseUint(f[48], 10, 64)
		p.envKnown = err1 == nil && err2 == nil
	}
	return p, true
}

// snapshot reads every process in /proc.
func snapshot() map[int]procInfo {
	out, _ := scan()
	return out
}

// scan reads every process in /proc; complete false when it could not
// read them all: /proc not listed, or a process's stat not opened for
// another reason than its end (EMFILE, say). A kill must not take such a
// scan's silence for the end of the tree.
func scan() (out map[int]procInfo, complete bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return map[int]procInfo{}, false
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	complete = err == nil
	out = make(map[int]procInfo, len(names))
	statFDs.Lock()
	defer statFDs.Unlock()
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil {
			p, ok, gone := statFDs.read(pid)
			if ok {
				out[pid] = p
			} else if !gone {
				complete = false
			}
		}
	}
	for pid, fd := range statFDs.fd {
		if _, ok := out[pid]; !ok {
			unix.Close(fd)
			delete(statFDs.fd, pid)
		}
	}
	tokenCache.prune(out)
	return out, complete
}

// statFDs holds /proc/PID/stat open for the processes of the latest scan
// (at most maxStatFDs()): the next scan reads each with one pread, not an
// open, read and close, the open being most of the cost. An fd names the
// process, not the pid: once the process is reaped its reads fail
// (ESRCH), and a process that takes the pid later is opened anew. Scans
// hold the lock throughout: an fd closed by one must not be read by
// another (its number may be another file's by then).
var statFDs = &heldStats{fd: map[int]int{}}

// maxStatFDs is a quarter of this process's fd limit, at most 4096: the
// rest is for its own files and sockets.
var maxStatFDs = sync.OnceValue(func() int {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return int(min(rl.Cur/4, 4096))
})

type heldStats struct {
	sync.Mutex
	fd map[int]int
}

// read reads pid's stat through its held fd, else opens one (held if
// there is room).
func (h *heldStats) read(pid int) (p procInfo, ok, gone bool) {
	if fd, ok := h.fd[pid]; ok {
		if p, ok := preadStat(fd, pid); ok {
			return p, true, false
		}
		unix.Close(fd)
		delete(h.fd, pid)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/stat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return procInfo{}, false, errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
	}
	p, ok = preadStat(fd, pid)
	if ok && len(h.fd) < maxStatFDs() {
		h.fd[pid] = fd
	} else {
		unix.Close(fd)
	}
	return p, ok, !ok // a stat opened but not read: the process ended between
}

// preadStat reads a /proc/PID/stat from its start: the kernel writes it
// anew for each read from offset 0.
func preadStat(fd, pid int) (p procInfo, ok bool) {
	bp := procBufs.Get().(*[]byte)
	defer procBufs.Put(bp)
	n, err := unix.Pread(fd, *bp, 0)
	if err != nil || n == len(*bp) { // a stat line is far shorter
		return procInfo{}, false
	}
	return parseStat(pid, string((*bp)[:n]))
}

// tokenCache holds the tokens in the environment of each process image
// read: a process's /proc/PID/environ is the block its last exec laid out,
// at the addresses its stat shows, so while the pid, start time and those
// addresses stay, the tokens do. (A process may write over the block
// itself, as PostgreSQL's setproctitle does: the tokens cached are then
// those it was started with, the token it hides still its. Writing a token
// in without an exec takes holding it already: a descendant of the
// service, found by its parent, group or session while the runner
// watches.) It holds only processes the latest scan saw.
var tokenCache = &envTokens{m: map[int]cachedTokens{}}

type envTokens struct {
	mu sync.Mutex
	m  map[int]cachedTokens
}

type cachedTokens struct {
	start  string
	env    [2]uint64
	tokens []string
}

// tokensOf are the tokens in p's environment.
func tokensOf(p procInfo) []string {
	if p.envKnown && p.env == [2]uint64{} {
		// No environment we may read, or none laid out yet (an exec
		// under way): the next scan reads it.
		return nil
	}
	if !p.envKnown { // an older kernel: no telling an exec
		tok, _ := ownerTokens(p.pid)
		return tok
	}
	c := tokenCache
	c.mu.Lock()
	e, ok := c.m[p.pid]
	c.mu.Unlock()
	if ok && e.start == p.start && e.env == p.env {
		return e.tokens
	}
	tok, ok := ownerTokens(p.pid)
	if ok {
		c.mu.Lock()
		c.m[p.pid] = cachedTokens{start: p.start, env: p.env, tokens: tok}
		c.mu.Unlock()
	}
	return tok
}

// prune drops the processes procs (a whole scan) does not hold.
func (c *envTokens) prune(procs map[int]procInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.m {
		if _, ok := procs[pid]; !ok {
			delete(c.m, pid)
		}
	}
}
