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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/lazy"
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
// The file names the holder (pid, start time, session) and a random secret,
// and gets a line per service started: its pid, process group, session and
// start time, and the token its processes carry. Every process the package
// starts carries OwnerEnv=TOKEN in its environment, TOKEN being
// ID.SECRET.N, and passes it on to everything it starts (a double fork and
// setsid keep it), so a dead run's leftovers are found by their
// environment, even re-parented to init; the secret, readable only by this
// user (the lease is 0600, /proc/PID/environ is its owner's), makes a
// token no other user can name (leasecheck.go: what clean trusts).
//
// The lease file is in the temp root if that is this user's private dir,
// else in .drill-leases-UID there (leaseDir). Managed dirs are named
// drill-KIND-ID-RANDOM after the lease, in the temp root.

// OwnerEnv holds the tokens of the runs a process descends from, separated
// by spaces: a runner run as a service of another adds its own.
const OwnerEnv = "OUTBOXDRILL_OWNER"

// PostgresDir is the KIND of PostgreSQL's dir, drill-KIND-*: its start
// makes its dir with it, so that clean looks for exactly the dirs the
// servers make. A broker's server start (broker/X/Xserver) has its own,
// which its Kind.Dir names.
const PostgresDir = "pg"

// DirKinds are the KIND of every managed server's dir clean looks for:
// PostgreSQL's and every registered broker's (broker.Kind.Dir). The
// registry is read now, not at init: cmd/runner fills it, and the broker
// packages import this one.
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
	leaseFileName = lazy.Regexp(`^drill-run-([0-9a-f]{8})\.lease$`)
	// leasedDirName is a managed dir's name: its KIND (one of DirKinds for
	// clean to look at it), its run's lease id and makeDir's random part.
	leasedDirName = lazy.Regexp(`^drill-([a-z][a-z0-9]*)-([0-9a-f]{8})-[0-9]+$`)
)

// lease is this process's lease in one temp root.
type lease struct {
	id, secret string
	root, path string
	f          *os.File // locked; never closed while refs > 0
	refs       int      // dirs and services that hold it
	tokens     int      // tokens handed out
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
	Secret  string `json:"secret"` // of the tokens: ID.SECRET.N
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
	self, _ := readProc(os.Getpid())
	sid, _ := unix.Getsid(0)
	exe, _ := os.Executable()
	for range 10 {
		dir, err := leaseDir(root, true)
		if err != nil {
			return nil, fmt.Errorf("lease file: %w", err)
		}
		b := make([]byte, 4+16)
		_, _ = rand.Read(b)
		id, secret := hex.EncodeToString(b[:4]), hex.EncodeToString(b[4:])
		// CreateTemp: O_EXCL, mode 0600 (what clean requires), this user's.
		f, err := os.CreateTemp(dir, ".drill-run-*.tmp")
		if errors.Is(err, fs.ErrNotExist) {
			continue // another runner's release removed the emptied dir
		} else if err != nil {
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
		// Readable by this user only: it holds the tokens' secret.
		if err := f.Chmod(0o600); err != nil {
			return fail(err)
		}
		hdr, _ := json.Marshal(leaseHeader{Lease: id, Secret: secret, PID: os.Getpid(), Start: self.start, Session: sid, Exe: exe, At: time.Now().UTC().Format(time.RFC3339)})
		if _, err := f.Write(append(hdr, '\n')); err != nil {
			return fail(err)
		}
		path, err := linkLease(f.Name(), root, dir, id)
		if errors.Is(err, fs.ErrExist) {
			f.Close()
			os.Remove(f.Name())
			continue
		} else if err != nil {
			return fail(err)
		}
		os.Remove(f.Name())
		return &lease{id: id, secret: secret, root: root, path: path, f: f}, nil
	}
	return nil, errors.New("lease file: no free name")
}

// linkLease gives the lease file tmp its name in dir, and, when dir is
// not root, the same file a second name in root, where a clean of a runner
// before private lease dirs looks for it: one that found none there would
// take this live run's dirs for a dead run's. Links, not renames: another
// run's lease of the same id stays (fs.ErrExist: draw another id).
func linkLease(tmp, root, dir, id string) (string, error) {
	name := "drill-run-" + id + ".lease"
	path := filepath.Join(dir, name)
	if err := os.Link(tmp, path); err != nil {
		return "", err
	}
	if dir == root {
		return path, nil
	}
	if err := os.Link(tmp, filepath.Join(root, name)); err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// compatName is the lease's second name, in its temp root (linkLease).
func (l *lease) compatName() string {
	if filepath.Dir(l.path) == l.root {
		return ""
	}
	return filepath.Join(l.root, filepath.Base(l.path))
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
	if c := l.compatName(); c != "" {
		os.Remove(c)
		os.Remove(filepath.Dir(l.path)) // .drill-leases-UID, if no other lease is in it
	}
	l.f.Close()
	if leases.byRoot[l.root] == l {
		delete(leases.byRoot, l.root)
	}
}

// token is a new token of the lease for one process tree: ID.SECRET.N.
func (l *lease) token() string {
	leases.Lock()
	defer leases.Unlock()
	l.tokens++
	return tokenPrefix(l.id, l.secret) + strconv.Itoa(l.tokens)
}

// tokenPrefix starts every token of lease id: ID.SECRET.
func tokenPrefix(id, secret string) string { return id + "." + secret + "." }

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
func MakeDir(kind string) (string, error) {
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

// ownerTokens are the tokens in pid's environment (none for a zombie),
// and whether it could be read.
func ownerTokens(pid int) (tokens []string, ok bool) {
	ok = readProcFile(strconv.Itoa(pid)+"/environ", func(b []byte) {
		for kv := range strings.SplitSeq(string(b), "\x00") {
			if v, found := strings.CutPrefix(kv, OwnerEnv+"="); found {
				tokens = strings.Fields(v)
				return
			}
		}
	})
	return tokens, ok
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
	// Unleased are drill-KIND-N dirs this user's runner made before leases
	// (no run id in their name): CleanDeadRuns leaves them to the caller.
	Unleased []string
	// Refused are lease files and dirs named as the runner names them but
	// not provably its (leasecheck.go), each with why: left alone.
	Refused []string
}

// CleanDeadRuns takes what runs whose lease no process holds left in roots:
// it kills their processes (the services and everything those started,
// found by the token in their environment and by the recorded process
// groups and sessions), then removes their dirs and lease files. A dir
// whose lease is held stays, whatever runs in it; so does anything this
// user's runner did not provably write (leasecheck.go).
func CleanDeadRuns(roots []string) (Reclaimed, error) {
	var rc Reclaimed
	var errs []error
	for _, root := range roots {
		errs = append(errs, cleanRoot(root, &rc))
	}
	return rc, errors.Join(errs...)
}

// refused is a lease or dir left alone, and why.
type refused struct{ msg string }

func (r refused) Error() string { return r.msg }

// cleanRoot is CleanDeadRuns in one temp root.
func cleanRoot(root string, rc *Reclaimed) error {
	ldir, err := leaseDir(root, false)
	if err != nil { // a planted lease dir: no lease there is judged, nor their dirs
		rc.Refused = append(rc.Refused, err.Error())
		return nil
	}
	dead, err := reclaimLeases(ldir, rc)
	errs := []error{err}
	for _, kind := range DirKinds() {
		dirs, _ := filepath.Glob(filepath.Join(root, "drill-"+kind+"-*"))
		for _, d := range dirs {
			errs = append(errs, judgeDir(d, kind, root, ldir, dead, rc))
		}
	}
	for _, p := range dead { // last: a clean cut short finds its dirs again
		removeCompat(p, root)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeCompat removes the second name in root of the dead lease at p
// (linkLease), if it is that very file.
func removeCompat(p, root string) {
	c := filepath.Join(root, filepath.Base(p))
	if c == p {
		return
	}
	a, errA := os.Lstat(p)
	b, errB := os.Lstat(c)
	if errA == nil && errB == nil && os.SameFile(a, b) {
		os.Remove(c)
	}
}

// reclaimLeases takes the leases in ldir no process holds: returns their
// paths by run id once it has killed what their runs left running.
func reclaimLeases(ldir string, rc *Reclaimed) (map[string]string, error) {
	dead := map[string]string{}
	if ldir == "" {
		return dead, nil // none was ever made here
	}
	stale, _ := filepath.Glob(filepath.Join(ldir, ".drill-run-*.tmp"))
	for _, p := range stale { // a runner killed while making its lease
		if f, err := openLease(p); err == nil {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				os.Remove(p)
			}
			f.Close()
		}
	}
	var errs []error
	files, _ := filepath.Glob(filepath.Join(ldir, "drill-run-*.lease"))
	for _, p := range files {
		m := leaseFileName().FindStringSubmatch(filepath.Base(p))
		if m == nil {
			continue
		}
		killed, taken, err := reclaimLease(p, m[1])
		rc.Killed = append(rc.Killed, killed...)
		if r := (refused{}); errors.As(err, &r) {
			rc.Refused = append(rc.Refused, r.msg)
		} else if err != nil {
			errs = append(errs, err)
		}
		if taken {
			dead[m[1]] = p
		}
	}
	return dead, errors.Join(errs...)
}

// judgeDir removes the managed dir d (of kind, in root) if its run is dead
// (its lease in dead, or gone) and this user's runner made it; a live
// run's is listed, anything else left alone.
func judgeDir(d, kind, root, ldir string, dead map[string]string, rc *Reclaimed) error {
	m := leasedDirName().FindStringSubmatch(filepath.Base(d))
	if m == nil || m[1] != kind {
		// Not a leased name: a runner's before leases only if of exactly
		// that shape and made as it made them; anything else is not ours.
		if l := legacyDirName().FindStringSubmatch(filepath.Base(d)); l != nil && l[1] == kind && madeDir(d, kind) == "" {
			rc.Unleased = append(rc.Unleased, d)
		}
		return nil
	}
	if why := madeDir(d, kind); why != "" {
		rc.Refused = append(rc.Refused, fmt.Sprintf("%s is %s: not made by this user's runner, left alone", d, why))
		return nil
	}
	if _, ok := dead[m[2]]; !ok {
		// The lease was made before the dir: if it is not there now, its
		// run ended (and removes the dir) or a clean took it. One where
		// a runner before private lease dirs kept it is not ours to judge.
		for _, dir := range []string{ldir, root} {
			if dir != "" && leaseHeld(filepath.Join(dir, "drill-run-"+m[2]+".lease")) {
				rc.Live = append(rc.Live, d)
				return nil
			}
		}
	}
	if err := os.RemoveAll(d); err != nil { // RemoveAll follows no symlink
		return err
	}
	rc.Removed = append(rc.Removed, d)
	return nil
}

// leaseHeld reports whether a process holds the lease file at path (false
// when there is none; true when it is not a lease this user's runner
// wrote, or cannot be read: not ours to judge).
func leaseHeld(path string) bool {
	f, err := openLease(path)
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
}

// reclaimLease takes the lease file at path, of run id, if this user's
// runner wrote it and no process holds it: kills what its run left running
// (a pid only while its start time is the one recorded and it carries a
// token of the lease) and reports it taken. A held lease is left alone; one
// not provably this user's runner's is a refused error.
func reclaimLease(path, id string) (killed []string, taken bool, err error) {
	f, err := openLease(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil // its run ended, or another clean took it
	} else if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil // live
		}
		return nil, false, fmt.Errorf("lease %s: %w", path, err)
	}
	for _, p := range killTrees(leaseTrees(f, id), stopGrace, nil) {
		killed = append(killed, fmt.Sprintf("pid %d (%s), run %s", p.pid, p.comm, id))
	}
	return killed, true, nil
}

// leaseTrees are the process trees the lease file f of run id names: each
// service whose token is the lease's (ID.SECRET.), and every process
// carrying one. A lease with no secret (cut short, or from a runner before
// secrets) names none: nothing of it can be told from another's.
func leaseTrees(f *os.File, id string) []tree {
	var trees []tree
	secret := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct { // a header or a service: the fields of both
			Lease, Secret  string
			Service, Token string
			PID            int `json:"pid"`
			Start          string
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue // a line cut short by the SIGKILL
		}
		if rec.Lease == id && rec.Service == "" && secretForm().MatchString(rec.Secret) {
			secret = rec.Secret
		}
		if secret != "" && rec.Service != "" && rec.PID > 1 && strings.HasPrefix(rec.Token, tokenPrefix(id, secret)) {
			trees = append(trees, tree{leader: rec.PID, start: rec.Start, token: rec.Token, strict: true})
		}
	}
	if secret == "" {
		return nil
	}
	// Everything of the run, whichever service: the token's prefix.
	return append(trees, tree{token: tokenPrefix(id, secret), prefix: true})
}

// secretForm is a lease's secret as newLease writes it: 16 random bytes.
var secretForm = lazy.Regexp(`^[0-9a-f]{32}$`)
