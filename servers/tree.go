package servers

import (
	"errors"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every descendant of a service, found and killed. A process group kill
// misses what a service double-forks and setsid's (a daemon, or what `npm
// start` or a shell wrapper leaves), and the kernel's parent-death signal
// reaches only the direct child. So:
//
//   - Each service runs in a session of its own (setsid): a descendant that
//     changes its process group stays in it.
//   - Each carries a token in its environment (OwnerEnv), inherited across
//     forks, setsid and re-parenting, and readable in /proc/PID/environ.
//   - The runner is a child subreaper (PR_SET_CHILD_SUBREAPER) once it has
//     started a service: an orphaned descendant re-parents to the runner,
//     not to init, and the runner reaps it once it is dead.
//
// A service's processes are then its leader, everything carrying its token,
// its session and process group, and, to a fixed point, every process whose
// parent, process group or session is one of those (a descendant that
// cleared its environment). Stop, Kill and the end of a scenario kill all
// of them; `clean` does the same, from the lease file, for a run that was
// SIGKILLed.
//
// Why not a cgroup per service: cgroup v2 needs a delegated, writable
// subtree, which an unprivileged CI user or a Docker container rarely has
// (this repository's own machines run a hybrid v1 hierarchy), so it could
// only ever be a second, mostly untested code path; the environment token
// works for any user on any Linux, also after the runner is gone. What it
// cannot follow is a descendant that both clears its environment and
// leaves the session and the runner's tree while the runner is not looking
// (it forks, setsid's, execs with an empty environment and its parent
// exits, all between two scans): a cgroup would be the answer to that one.

// tree names the processes of one service: its leader (pid and start
// time; 0 for none) and the token its processes carry (or, prefix, the
// start of the tokens of a whole run).
type tree struct {
	leader int
	start  string
	token  string
	prefix bool
	// strict: the leader is its only while it carries the token too, not
	// by its start time alone (clean's trees, read from a lease file; a
	// live service's leader is this process's child, its pid not reused).
	strict bool
}

// owns reports whether p carries the tree's token.
func (t tree) owns(p procInfo) bool {
	if t.token == "" {
		return false
	}
	return slices.ContainsFunc(tokensOf(p), func(tok string) bool {
		return tok == t.token || t.prefix && strings.HasPrefix(tok, t.token)
	})
}

// members are the processes of trees in procs (zombies too): see the top
// of this file.
func members(trees []tree, procs map[int]procInfo) map[int]procInfo {
	self := os.Getpid()
	skip := func(pid int) bool { return pid <= 1 || pid == self }
	in := map[int]procInfo{}
	for _, t := range trees {
		leader, there := procs[t.leader]
		leaderOurs := t.leader > 1 && there && t.start != "" && leader.start == t.start &&
			(!t.strict || t.owns(leader))
		for pid, p := range procs {
			if !skip(pid) && (leaderOurs && pid == t.leader || t.owns(p)) {
				in[pid] = p
			}
		}
		if t.leader <= 1 || there && !leaderOurs {
			continue // no leader, or its pid is another process's now
		}
		// The leader is ours, or gone: a pid is not reused while a process
		// group or session still bears it, so its group and session are its
		// own. But if it is gone they may have emptied and another process
		// may have reused the number since: one carrying the token says not.
		groupsOurs := leaderOurs
		for _, p := range procs {
			if !groupsOurs && (p.pgrp == t.leader || p.session == t.leader) && t.owns(p) {
				groupsOurs = true
			}
		}
		if groupsOurs {
			for pid, p := range procs {
				if !skip(pid) && (p.pgrp == t.leader || p.session == t.leader) {
					in[pid] = p
				}
			}
		}
	}
	if len(in) == 0 {
		return in
	}
	for grown := true; grown; {
		grown = false
		for pid, p := range procs {
			if _, ok := in[pid]; ok || skip(pid) {
				continue
			}
			_, byParent := in[p.ppid]
			_, byGroup := in[p.pgrp]
			_, bySession := in[p.session]
			if byParent || byGroup || bySession {
				in[pid] = p
				grown = true
			}
		}
	}
	return in
}

// liveMembers are the live members of trees, also added to seen.
func liveMembers(trees []tree, seen map[int]procInfo) map[int]procInfo {
	live := map[int]procInfo{}
	for pid, p := range members(trees, snapshot()) {
		if p.alive() {
			live[pid] = p
			if _, ok := seen[pid]; !ok {
				seen[pid] = p
			}
		}
	}
	return live
}

// killTrees SIGKILLs every member of trees until none is alive (zombies
// count as dead) or limit passes, reaps the zombies that re-parented to
// this process, those of the processes in seen (members seen before, may
// be nil) too, and returns the processes it killed.
//
// It scans, kills what the scan found alive, waits for those to die and
// scans again, until a scan finds none alive: a member may have forked
// between a scan and its SIGKILL. The wait is on pidfds, not a rescan each
// millisecond; it is cut at rescanEvery so that a process slow to die (in
// uninterruptible sleep) does not keep what another member forked waiting
// for its kill.
func killTrees(trees []tree, limit time.Duration, seen map[int]procInfo) []procInfo {
	if seen == nil {
		seen = map[int]procInfo{}
	}
	seen = maps.Clone(seen)
	held := map[procInfo]int{} // the pidfd of each process signalled
	defer func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	}()
	var killed []procInfo
	for deadline := time.Now().Add(limit); ; {
		var live []int
		ms, complete := liveTreeMembers(trees, seen)
		for pid, p := range ms {
			if !slices.ContainsFunc(killed, func(k procInfo) bool { return k.pid == pid }) {
				killed = append(killed, p)
			}
			key := procInfo{pid: p.pid, start: p.start}
			fd, ok := held[key]
			if !ok {
				if fd = openChecked(p); fd >= 0 {
					held[key] = fd
				}
			}
			signalHeld(p, fd, syscall.SIGKILL)
			live = append(live, fd)
		}
		if len(live) == 0 && complete || time.Now().After(deadline) {
			break
		}
		if len(live) == 0 { // a scan that missed some: look again
			live = []int{-1}
		}
		awaitExit(live, min(time.Until(deadline), rescanEvery))
	}
	reapAdopted(seen)
	slices.SortFunc(killed, func(a, b procInfo) int { return a.pid - b.pid })
	return killed
}

// rescanEvery bounds killTrees's wait for the processes it killed.
const rescanEvery = 20 * time.Millisecond

// liveTreeMembers scans for the members of trees, adds them to seen, and
// returns the live ones. A member killed already may have lost what tied
// it to the tree (its parent died first): it is still one.
func liveTreeMembers(trees []tree, seen map[int]procInfo) (map[int]procInfo, bool) {
	procs, complete := scan()
	ms := members(trees, procs)
	for pid, p := range seen {
		if q, ok := procs[pid]; ok && q.start == p.start {
			ms[pid] = q
		}
	}
	maps.Copy(ms, orphansOf(trees, procs))
	live := map[int]procInfo{}
	for pid, p := range ms {
		if _, ok := seen[pid]; !ok {
			seen[pid] = p
		}
		if p.alive() {
			live[pid] = p
		}
	}
	return live, complete
}

// orphansOf are the zombie children of this process (orphans that
// re-parented here) in the process group or session a live service's
// leader (trees not strict) led: also when the leader is gone and no
// token says the group is still its, they are for reapAdopted to reap.
func orphansOf(trees []tree, procs map[int]procInfo) map[int]procInfo {
	self := os.Getpid()
	out := map[int]procInfo{}
	for _, t := range trees {
		if t.leader <= 1 || t.strict {
			continue
		}
		for pid, p := range procs {
			if p.ppid == self && !p.alive() && (p.pgrp == t.leader || p.session == t.leader) {
				out[pid] = p
			}
		}
	}
	return out
}

// sendSignal signals p if it is still the process it was (the pid with the
// same start time): through a pidfd, so the pid cannot be reused between
// the check and the signal.
func sendSignal(p procInfo, sig syscall.Signal) {
	fd := openChecked(p)
	if fd >= 0 {
		defer unix.Close(fd)
	}
	signalHeld(p, fd, sig)
}

// openChecked opens a pidfd of p if p is still the process it was: -1 if
// it is not, or if the kernel has no pidfds (Linux before 5.3).
func openChecked(p procInfo) int {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return -1
	}
	if q, ok := readProc(p.pid); !ok || q.start != p.start {
		unix.Close(fd)
		return -1
	}
	return fd
}

// signalHeld signals p through fd, its pidfd (openChecked), which names
// that very process however long it is held; with none (-1), by pid if p
// is still the process it was. Not only a kernel without pidfds (Linux
// before 5.3) gives none: a seccomp profile may answer pidfd_open with
// EPERM (Docker before 20.10), a process at its fd limit gets EMFILE, and
// a kill that sent nothing then would leave the whole tree running.
func signalHeld(p procInfo, fd int, sig syscall.Signal) {
	if fd >= 0 {
		_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		return
	}
	if q, ok := readProc(p.pid); ok && q.start == p.start {
		_ = syscall.Kill(p.pid, sig)
	}
}

// awaitExit waits up to d for the processes of the pidfds fds to exit
// (zombies count), or a millisecond if one has no pidfd (-1).
func awaitExit(fds []int, d time.Duration) {
	pfds := make([]unix.PollFd, 0, len(fds))
	for _, fd := range fds {
		if fd < 0 {
			time.Sleep(time.Millisecond)
			return
		}
		pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for deadline := time.Now().Add(d); len(pfds) > 0; {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		n, err := unix.Poll(pfds, int((left+time.Millisecond-1)/time.Millisecond))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			time.Sleep(time.Millisecond) // a rescan, but not at once
			return
		}
		if n == 0 {
			return
		}
		pfds = slices.DeleteFunc(pfds, func(p unix.PollFd) bool { return p.Revents != 0 })
	}
}

// direct are the processes startChild started: their own goroutine reaps
// them (exec.Cmd.Wait), the subreaper never does.
var direct = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

func isDirect(pid int) bool {
	direct.Lock()
	defer direct.Unlock()
	return direct.pids[pid]
}

// reapMu serialises the subreaper's waits: each checks its zombie first.
var reapMu sync.Mutex

// reapZombie reaps p if it is a zombie child of this process that
// startChild did not start: an orphan that re-parented here.
func reapZombie(p procInfo) bool {
	reapMu.Lock()
	defer reapMu.Unlock()
	q, ok := readProc(p.pid)
	if !ok || q.start != p.start || q.alive() || q.ppid != os.Getpid() || isDirect(p.pid) {
		return false
	}
	var ws syscall.WaitStatus
	n, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil)
	return err == nil && n == p.pid
}

// reapAdopted waits (at most a second) for the killed processes seen to
// die and reaps those that re-parented here. One whose parent is another
// dying member comes here once that parent is gone.
func reapAdopted(seen map[int]procInfo) {
	self := os.Getpid()
	for deadline := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
		waiting := false
		for pid, p := range seen {
			q, ok := readProc(pid)
			switch {
			case !ok || q.start != p.start:
				delete(seen, pid) // reaped
			case q.alive():
				waiting = true
			case q.ppid == self:
				if !isDirect(pid) {
					reapZombie(q)
				}
				delete(seen, pid)
			default:
				_, dying := seen[q.ppid]
				if !dying {
					delete(seen, pid) // another process's zombie to reap
				}
				waiting = waiting || dying
			}
		}
		if !waiting || time.Now().After(deadline) {
			return
		}
	}
}

// orphanGrace is how long at least (twice at most) a zombie child this
// process did not start stays before the subreaper reaps it: code that
// started a child itself (a test's exec.Cmd) reaps it at once.
const orphanGrace = time.Second

var subreaper struct {
	once sync.Once
	on   bool
}

// becomeSubreaper makes this process a child subreaper, once, and starts
// reaping the orphans that re-parent to it. It reports whether it is one.
func becomeSubreaper() bool {
	subreaper.once.Do(func() {
		if unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil {
			subreaper.on = true
			go reapOrphans()
		}
	})
	return subreaper.on
}

// reapOrphans reaps the zombie children that re-parented here: not
// started by startChild, and in a process group or session not this
// process's (a child a test started itself is in both; a service's
// descendant is in neither). It reaps one only once it has been a zombie
// for orphanGrace: it scans orphanGrace after a SIGCHLD, and then every
// orphanGrace while one waits, and reaps those the scan before found
// already. (It does not scan on every SIGCHLD: a kill's dozen SIGCHLDs
// would be a dozen scans of every process, for zombies that killTrees or
// exec.Cmd's Wait reap anyway.)
func reapOrphans() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	t := time.NewTimer(orphanGrace)
	armed := true
	self, pgrp := os.Getpid(), syscall.Getpgrp()
	sid, _ := unix.Getsid(0)
	before := map[procInfo]bool{} // the zombies the scan before found
	for {
		select {
		case <-ch:
			if !armed {
				t.Reset(orphanGrace)
				armed = true
			}
			continue
		case <-t.C:
			armed = false
		}
		next := map[procInfo]bool{}
		for _, p := range zombieChildScan() {
			if p.ppid != self || p.alive() || p.pgrp == pgrp && p.session == sid || isDirect(p.pid) {
				continue
			}
			key := procInfo{pid: p.pid, start: p.start}
			if !before[key] || !reapZombie(p) {
				next[key] = true
			}
		}
		before = next
		if len(before) > 0 {
			t.Reset(orphanGrace)
			armed = true
		}
	}
}

// zombieChildScan is a scan of every process if this process has a zombie
// child, else none: most SIGCHLDs find theirs reaped already (exec.Cmd's
// Wait, killTrees), and a child that dies later sends another.
func zombieChildScan() map[int]procInfo {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil)
	// With WNOHANG and no zombie, Linux leaves si_signo 0.
	if errors.Is(err, unix.ECHILD) || err == nil && info.Signo == 0 {
		return nil
	}
	return snapshot()
}
