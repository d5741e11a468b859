package servers

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outboxdrill/runner/broker"
)

// A run's lease. Whatever this process makes in a temp root (a managed
// server's dir, a service's processes) is tied to a lease file there,
// drill-run-ID.lease, that the process holds locked (flock LOCK_EX) from
// before it makes the first thing until the last is gone, whether its
// servers are up or not: a scenario that stops its own Redis or PostgreSQL
// for a while still holds it. The lock goes with the process (SIGKILL too;
// the descriptor is close-on-exec, so no child inherits it), so `clean`
// tells a dead run from a live one by trying the lock, never by which
// processes work in which dir.
//
// The file names the holder (pid, start time, session) and gets a line per
// service started: its pid, process group, session and start time, and the
// token its processes carry. Every process the package starts carries
// OwnerEnv=TOKEN in its environment, TOKEN being ID.N, and passes it on to
// everything it starts (a double fork and setsid keep it), so a dead run's
// leftovers are found by their environment, even re-parented to init.
//
// Managed dirs are named drill-KIND-ID-RANDOM after the lease.

// OwnerEnv holds the tokens of the runs a process descends from, separated
// by spaces: a runner run as a service of another adds its own.
const OwnerEnv = "OUTBOXDRILL_OWNER"

// The KIND of each managed server's dir, drill-KIND-*: the server's start
// makes its dir with it, and a broker's Kind.Dir names it, so that clean
// looks for exactly the dirs the servers make.
const (
	PostgresDir = "pg"
	RedisDir    = "redis"
	NATSDir     = "nats"
	RabbitMQDir = "rabbitmq"
	KafkaDir    = "kafka"
)

// DirKinds are the KIND of every managed server's dir clean looks for:
// PostgreSQL's and every registered broker's (broker.Kind.Dir). The
// registry is read now, not at init: the broker packages import this one.
func DirKinds() []string {
	kinds := []string{PostgresDir}
	for _, k := range broker.Kinds() {
		if k.Dir != "" && !slices.Contains(kinds, k.Dir) {
			kinds = append(kinds, k.Dir)
		}
	}
	return kinds
}

var (
	leaseFileName = regexp.MustCompile(`^drill-run-([0-9a-f]{8})\.lease$`)
	// leasedDirName is a managed dir's name: its KIND (one of DirKinds for
	// clean to look at it), its run's lease id and makeDir's random part.
	leasedDirName = regexp.MustCompile(`^drill-([a-z][a-z0-9]*)-([0-9a-f]{8})-[0-9]+$`)
)

// lease is this process's lease in one temp root.
type lease struct {
	id, root, path string
	f              *os.File // locked; never closed while refs > 0
	refs           int      // dirs and services that hold it
	tokens         int      // tokens handed out
}

// leases are this process's, by temp root (a test may change $TMPDIR, and
// a full /dev/shm sends later dirs to the temp dir): a lease lives next to
// what it covers.
var leases = struct {
	sync.Mutex
	byRoot map[string]*lease
	byDir  map[string]*lease
}{byRoot: map[string]*lease{}, byDir: map[string]*lease{}}

// leaseHeader is a lease file's first line.
type leaseHeader struct {
	Lease   string `json:"lease"`
	PID     int    `json:"pid"`
	Start   string `json:"start"` // the holder's start time (/proc/PID/stat field 22)
	Session int    `json:"sid"`
	Exe     string `json:"exe,omitempty"`
	At      string `json:"at"`
}

// serviceRecord is a lease file's line for a service started.
type serviceRecord struct {
	Service string `json:"service"`
	Token   string `json:"token"`
	PID     int    `json:"pid"`
	PGID    int    `json:"pgid"`
	Session int    `json:"sid"`
	Start   string `json:"start"`
}

// holdLease takes a reference on this process's lease in root, making
// (and locking) the lease file first if there is none.
func holdLease(root string) (*lease, error) {
	leases.Lock()
	defer leases.Unlock()
	if l := leases.byRoot[root]; l != nil {
		l.refs++
		return l, nil
	}
	l, err := newLease(root)
	if err != nil {
		return nil, err
	}
	l.refs = 1
	leases.byRoot[root] = l
	return l, nil
}

// newLease makes a lease file in root, locked before it has its name: a
// clean never sees it unlocked while this process lives.
func newLease(root string) (*lease, error) {
	self, _ := readStat(strconv.Itoa(os.Getpid()))
	sid, _ := unix.Getsid(0)
	exe, _ := os.Executable()
	for range 10 {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		id := hex.EncodeToString(b)
		f, err := os.CreateTemp(root, ".drill-run-*.tmp")
		if err != nil {
			return nil, fmt.Errorf("lease file: %w", err)
		}
		fail := func(err error) (*lease, error) {
			f.Close()
			os.Remove(f.Name())
			return nil, fmt.Errorf("lease file: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return fail(err)
		}
		// Readable by all: another user's clean can tell it is live.
		if err := f.Chmod(0o644); err != nil {
			return fail(err)
		}
		hdr, _ := json.Marshal(leaseHeader{Lease: id, PID: os.Getpid(), Start: self.start, Session: sid, Exe: exe, At: time.Now().UTC().Format(time.RFC3339)})
		if _, err := f.Write(append(hdr, '\n')); err != nil {
			return fail(err)
		}
		path := filepath.Join(root, "drill-run-"+id+".lease")
		// Link, not rename: another run's lease of the same id stays.
		if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
			f.Close()
			os.Remove(f.Name())
			continue
		} else if err != nil {
			return fail(err)
		}
		os.Remove(f.Name())
		return &lease{id: id, root: root, path: path, f: f}, nil
	}
	return nil, errors.New("lease file: no free name")
}

// release drops a reference; the last removes the lease file (all it
// covered is gone) and unlocks it.
func (l *lease) release() {
	leases.Lock()
	defer leases.Unlock()
	if l.refs--; l.refs > 0 {
		return
	}
	os.Remove(l.path)
	l.f.Close()
	if leases.byRoot[l.root] == l {
		delete(leases.byRoot, l.root)
	}
}

// token is a new token of the lease for one process tree: ID.N.
func (l *lease) token() string {
	leases.Lock()
	defer leases.Unlock()
	l.tokens++
	return l.id + "." + strconv.Itoa(l.tokens)
}

// record appends a line to the lease file: best effort (the environment
// token finds the processes without it).
func (l *lease) record(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	leases.Lock()
	defer leases.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

// makeDir creates a server's dir, drill-KIND-ID-*, in TempRoot, under this
// process's lease there (held until dropDir).
func makeDir(kind string) (string, error) {
	root := TempRoot()
	l, err := holdLease(root)
	if err != nil {
		return "", fmt.Errorf("%s temp dir: %w", kind, err)
	}
	dir, err := os.MkdirTemp(root, "drill-"+kind+"-"+l.id+"-*")
	if err != nil {
		l.release()
		return "", fmt.Errorf("%s temp dir: %w", kind, err)
	}
	leases.Lock()
	leases.byDir[dir] = l
	leases.Unlock()
	return dir, nil
}

// dropDir releases the lease a dir made by makeDir held; the dir is gone.
func dropDir(dir string) {
	leases.Lock()
	l := leases.byDir[dir]
	delete(leases.byDir, dir)
	leases.Unlock()
	if l != nil {
		l.release()
	}
}

// dirToken is a new token of the lease of the managed dir dir ("" for a dir
// makeDir did not make).
func dirToken(dir string) string {
	leases.Lock()
	l := leases.byDir[dir]
	leases.Unlock()
	if l == nil {
		return ""
	}
	return l.token()
}

// withOwner is env (nil: this process's) with token added to OwnerEnv.
func withOwner(env []string, token string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+1)
	prev := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, OwnerEnv+"="); ok {
			prev = v
			continue
		}
		out = append(out, kv)
	}
	return append(out, OwnerEnv+"="+strings.TrimSpace(prev+" "+token))
}

// ownerTokens are the tokens in pid's environment (none for a zombie or a
// process we may not read).
func ownerTokens(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return nil
	}
	for kv := range strings.SplitSeq(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, OwnerEnv+"="); ok {
			return strings.Fields(v)
		}
	}
	return nil
}

// TempRoots are the dirs managed servers may have made their dirs in: the
// temp dir, and /dev/shm unless $TMPDIR says where.
func TempRoots() []string {
	roots := []string{os.TempDir()}
	if fi, err := os.Stat(shmDir); err == nil && fi.IsDir() && os.Getenv("TMPDIR") == "" && roots[0] != shmDir {
		roots = append(roots, shmDir)
	}
	return roots
}

// Reclaimed is what CleanDeadRuns found and did.
type Reclaimed struct {
	Removed []string // dead runs' dirs
	Killed  []string // dead runs' processes: "pid 123 (sleep), run 0123abcd"
	Live    []string // live runs' dirs, left alone
	// Unleased are drill-KIND-* dirs with no run id in their name (made
	// by a runner before leases): CleanDeadRuns leaves them to the caller.
	Unleased []string
}

// CleanDeadRuns takes what runs whose lease no process holds left in roots:
// it kills their processes (the services and everything those started,
// found by the token in their environment and by the recorded process
// groups and sessions), then removes their dirs and lease files. A dir
// whose lease is held stays, whatever runs in it.
func CleanDeadRuns(roots []string) (Reclaimed, error) {
	var rc Reclaimed
	var errs []error
	for _, root := range roots {
		stale, _ := filepath.Glob(filepath.Join(root, ".drill-run-*.tmp"))
		for _, p := range stale { // a runner killed while making its lease
			if f, err := os.Open(p); err == nil {
				if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
					os.Remove(p)
				}
				f.Close()
			}
		}
		files, _ := filepath.Glob(filepath.Join(root, "drill-run-*.lease"))
		for _, p := range files {
			if !leaseFileName.MatchString(filepath.Base(p)) {
				continue
			}
			killed, err := reclaimLease(p)
			rc.Killed = append(rc.Killed, killed...)
			errs = append(errs, err)
		}
	}
	for _, root := range roots {
		for _, kind := range DirKinds() {
			dirs, _ := filepath.Glob(filepath.Join(root, "drill-"+kind+"-*"))
			for _, d := range dirs {
				m := leasedDirName.FindStringSubmatch(filepath.Base(d))
				if m == nil {
					rc.Unleased = append(rc.Unleased, d)
					continue
				}
				// The lease was made before the dir: if it is not there now,
				// its run ended (and removes the dir) or a clean took it.
				if leaseHeld(filepath.Join(root, "drill-run-"+m[2]+".lease")) {
					rc.Live = append(rc.Live, d)
					continue
				}
				if err := os.RemoveAll(d); err != nil {
					errs = append(errs, err)
					continue
				}
				rc.Removed = append(rc.Removed, d)
			}
		}
	}
	return rc, errors.Join(errs...)
}

// leaseHeld reports whether a process holds the lease file at path (false
// when there is none; true when it cannot be read: not ours to judge).
func leaseHeld(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// reclaimLease takes the lease file at path if no process holds it: kills
// what its run left running and removes the file. A held lease (or one it
// cannot read: another user's) is left alone.
func reclaimLease(path string) (killed []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil // gone (its run ended, another clean took it), or not ours to judge
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil // live
		}
		return nil, fmt.Errorf("lease %s: %w", path, err)
	}
	var trees []tree
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct { // a header or a service: the fields of both
			Service, Token string
			PID            int `json:"pid"`
			Start          string
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue // a line cut short by the SIGKILL
		}
		if rec.Service != "" && rec.PID > 1 {
			trees = append(trees, tree{leader: rec.PID, start: rec.Start, token: rec.Token})
		}
	}
	id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "drill-run-"), ".lease")
	// Everything of the run, whichever service: the token's prefix.
	trees = append(trees, tree{token: id + ".", prefix: true})
	for _, p := range killTrees(trees, stopGrace, nil) {
		killed = append(killed, fmt.Sprintf("pid %d (%s), run %s", p.pid, p.comm, id))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return killed, err
	}
	return killed, nil
}
