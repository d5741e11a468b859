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
func killTrees(trees []tree, limit time.Duration, seen map[int]procInfo) []procInfo {
	if seen == nil {
		seen = map[int]procInfo{}
	}
	seen = maps.Clone(seen)
	var killed []procInfo
	for deadline := time.Now().Add(limit); ; time.Sleep(time.Millisecond) {
		procs := snapshot()
		ms := members(trees, procs)
		// A member killed already may have lost what tied it to the tree
		// (its parent died first): it is still one.
		for pid, p := range seen {
			if q, ok := procs[pid]; ok && q.start == p.start {
				ms[pid] = q
			}
		}
		live := 0
		for pid, p := range ms {
			if _, ok := seen[pid]; !ok {
				seen[pid] = p
			}
			if p.alive() {
				if !slices.ContainsFunc(killed, func(k procInfo) bool { return k.pid == pid }) {
					killed = append(killed, p)
				}
				live++
				sendSignal(p, syscall.SIGKILL)
			}
		}
		if live == 0 || time.Now().After(deadline) {
			break
		}
	}
	reapAdopted(seen)
	slices.SortFunc(killed, func(a, b procInfo) int { return a.pid - b.pid })
	return killed
}

// sendSignal signals p if it is still the process it was (the pid with the
// same start time): through a pidfd, so the pid cannot be reused between
// the check and the signal.
func sendSignal(p procInfo, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err == nil {
		defer unix.Close(fd)
		if q, ok := readProc(p.pid); ok && q.start == p.start {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		return
	}
	if errors.Is(err, unix.ENOSYS) { // Linux before 5.3
		if q, ok := readProc(p.pid); ok && q.start == p.start {
			_ = syscall.Kill(p.pid, sig)
		}
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

// reapOrphansIn reaps the zombie children of this process (orphans that
// re-parented here) in the process group or session that leader led.
func reapOrphansIn(leader int) {
	self := os.Getpid()
	for _, p := range snapshot() {
		if p.ppid == self && !p.alive() && (p.pgrp == leader || p.session == leader) {
			reapZombie(p)
		}
	}
}

// orphanGrace is how long a zombie child this process did not start stays
// before the subreaper reaps it: code that started a child itself (a
// test's exec.Cmd) reaps it at once.
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

// reapOrphans reaps, on every SIGCHLD and then every orphanGrace while any
// is waiting, the zombie children that re-parented here: not started by
// startChild, and in a process group or session not this process's (a
// child a test started itself is in both; a service's descendant is in
// neither).
func reapOrphans() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	t := time.NewTimer(orphanGrace)
	self, pgrp := os.Getpid(), syscall.Getpgrp()
	sid, _ := unix.Getsid(0)
	first := map[procInfo]time.Time{}
	for {
		select {
		case <-ch:
		case <-t.C:
		}
		now := time.Now()
		next := map[procInfo]time.Time{}
		for _, p := range snapshot() {
			if p.ppid != self || p.alive() || p.pgrp == pgrp && p.session == sid || isDirect(p.pid) {
				continue
			}
			key := procInfo{pid: p.pid, start: p.start}
			since, ok := first[key]
			if !ok {
				since = now
			}
			if now.Sub(since) < orphanGrace || !reapZombie(p) {
				next[key] = since
			}
		}
		first = next
		if len(first) > 0 {
			t.Reset(orphanGrace)
		}
	}
}
