package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pgVersionsGlob is where Debian installs the server binaries of each
// PostgreSQL major version; they are not on PATH there.
const pgVersionsGlob = "/usr/lib/postgresql/*/bin"

// initdbArgs make a cluster fit for tests: trust auth on loopback only, a
// deterministic encoding and locale. --no-sync only skips flushing the fresh
// cluster to disk at the end of initdb, which a throwaway cluster never needs;
// the running server keeps fsync on.
var initdbArgs = []string{
	"-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C",
	"--no-sync", "--no-instructions",
	// 1 MB WAL segments instead of 16: the first segment is part of every
	// copy of the cached cluster; nothing a scenario checks depends on it.
	"--wal-segsize=1",
}

// serverSettings are test-friendly; none of them changes what a drill
// proves. fsync, synchronous_commit and full_page_writes keep their
// defaults: a commit is acknowledged only after its WAL is written, which is
// what a killed server's crash recovery replays (and a SIGKILL may tear an
// 8 kB page write at 4 kB, which full page images repair).
var serverSettings = []string{
	"listen_addresses=127.0.0.1",
	"shared_buffers=32MB",
	"max_connections=200",
	"huge_pages=off", // skip trying huge pages on every start
	"log_min_messages=warning",
	// Dynamic shared memory as files in the data dir instead of POSIX
	// segments in /dev/shm: a killed server's segments then go with its
	// dir, where otherwise every SIGKILL leaves 1 MB in RAM until reboot.
	"dynamic_shared_memory_type=mmap",
	// The CDC relay reads the outbox from a logical replication slot.
	"wal_level=logical",
}

// Postgres is a throwaway PostgreSQL server owned by this process. Stop and
// Halt shut it down fast (SIGINT: abort transactions, checkpoint, exit).
// Kill SIGKILLs the postmaster and every backend, as a crash would; the
// data dir stays, so Start runs crash recovery from the WAL.
type Postgres struct {
	URL  string // admin URL: postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
	Port int
	Dir  string // temp dir holding data dir, socket dir and log

	binDir  string              // holds initdb and postgres
	dataDir string              // Dir/data
	sockDir string              // Dir/sock: Unix socket, kept out of /var/run/postgresql
	logPath string              // Dir/postgres.log
	cluster string              // cluster_name, tells our server from a stranger on the port
	cred    *syscall.Credential // run as this user (nil: as ourselves)
	echo    io.Writer           // PostgresOptions.Log
	extra   []string            // PostgresOptions.Settings

	*Lifecycle[int]
}

// PostgresOptions configure StartPostgres.
type PostgresOptions struct {
	// BinDir is the directory holding initdb and postgres. Empty: search
	// PATH, then /usr/lib/postgresql/*/bin (highest version first).
	BinDir string
	// Log, if set, gets a copy of the server's output (not initdb's). The
	// output always goes to Dir/postgres.log.
	Log io.Writer
	// NoCache runs initdb even when an initialised data dir for these
	// binaries is cached under the user cache dir (outboxdrill/pgdata-*).
	NoCache bool
	// Settings are more server settings ("max_connections=30"), given
	// after the defaults, which they override.
	Settings []string
}

// StartPostgres creates a fresh cluster in a temp dir and starts a server on
// a free loopback port. It returns once the server accepts connections.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	binDir, err := findPostgresBin(opts.BinDir)
	if err != nil {
		return nil, err
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	dir, err := MakeDir(PostgresDir)
	if err != nil {
		return nil, err
	}
	p := newPostgres(binDir, dir, cred, opts.Log)
	p.extra = opts.Settings
	if err := p.First(ctx, func() error { return p.initdb(ctx, !opts.NoCache) }); err != nil {
		return nil, err
	}
	p.Port = p.ports
	p.URL = postgresURL(p.Port)
	return p, nil
}

func newPostgres(binDir, dir string, cred *syscall.Credential, echo io.Writer) *Postgres {
	p := &Postgres{
		Dir:     dir,
		binDir:  binDir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		cluster: filepath.Base(dir),
		cred:    cred,
		echo:    echo,
	}
	p.Lifecycle = NewLifecycle(LifeSpec[int]{
		Name: "postgres", Dir: dir, StopSignal: syscall.SIGINT,
		FreePorts: FreePort, Launch: p.launch, Kill: p.kill,
	})
	return p
}

func postgresURL(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// kill SIGKILLs the postmaster and all its children. Every child calls
// setsid(), so killing the postmaster's process group misses them: freeze
// the postmaster (no new forks), then kill its children with it, as a crash
// of the whole server would. The postmaster is not reaped yet (we reap it),
// so its pid and its children's parent pid are still its own.
func (p *Postgres) kill(c *Child) {
	var kids []int
	if !c.Exited() {
		_ = c.cmd.Process.Signal(syscall.SIGSTOP)
		kids = childrenOf(c.PID())
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	c.Kill()
	if p.isEnded() {
		return // SIGKILLed, they go; no restart waits for them
	}
	// A restart on this data dir refuses to run while a killed child is
	// still attached to the old shared memory.
	for deadline := time.Now().Add(stopGrace); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !slices.ContainsFunc(kids, running) {
			break
		}
	}
}

// initdb prepares Dir for the server user and creates the cluster in it:
// from the cache if useCache and there is one, else by running initdb (and
// then filling the cache).
func (p *Postgres) initdb(ctx context.Context, useCache bool) error {
	if err := os.Mkdir(p.sockDir, 0o700); err != nil {
		return fmt.Errorf("postgres socket dir: %w", err)
	}
	uid, gid := -1, -1
	if p.cred != nil {
		uid, gid = int(p.cred.Uid), int(p.cred.Gid)
		if err := ChownTree(p.Dir, uid, gid); err != nil {
			return fmt.Errorf("hand %s to the postgres user: %w", p.Dir, err)
		}
	}
	cache := ""
	if useCache {
		cache = cacheFile(p.binDir)
	}
	if restoreCache(cache, p.dataDir, uid, gid) {
		return nil
	}
	// initdb's chatter goes to the log file only; a failure quotes its tail.
	f, out, err := openLog(p.logPath, nil)
	if err != nil {
		return fmt.Errorf("postgres log: %w", err)
	}
	offset := LogSize(p.logPath)
	args := append([]string{"-D", p.dataDir}, initdbArgs...)
	cmd := NewCmd(filepath.Join(p.binDir, "initdb"), args, p.Dir, out, p.cred)
	c, err := startChild("initdb", cmd, f)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		c.Kill()
		return fmt.Errorf("initdb: %w", ctx.Err())
	}
	if c.err != nil {
		return &startError{what: "initdb failed", logPath: p.logPath, exit: c.err, output: logSince(p.logPath, offset)}
	}
	saveCache(p.dataDir, cache)
	return nil
}

// launch starts the postmaster on port and waits until it accepts
// connections.
func (p *Postgres) launch(ctx context.Context, port int) (*Child, error) {
	args := []string{"-D", p.dataDir, "-p", strconv.Itoa(port), "-k", p.sockDir, "-c", "cluster_name=" + p.cluster}
	for _, s := range append(slices.Clone(serverSettings), p.extra...) {
		args = append(args, "-c", s)
	}
	return Launch{
		Name: "postgres", LogPath: p.logPath, Echo: p.echo,
		Command: func(out io.Writer) *exec.Cmd {
			return NewCmd(filepath.Join(p.binDir, "postgres"), args, p.Dir, out, p.cred)
		},
		// No probe: the pid file is the postmaster's own word, and a
		// connection to check it would cost a backend start (16–35 ms
		// here) the run's first connection pays anyway.
		Ready:    func(c *Child) error { return p.pidFileReady(c, port) },
		ReadyDir: p.dataDir, // postmaster.pid's, read when it changes
	}.Run(ctx, p.kill)
}

// pidFileReady passes once the postmaster c says in postmaster.pid that it
// accepts connections on port: its 8th line, the status, becomes "ready"
// then. The pid on the first line must be c's: a killed server leaves its
// file behind, saying "ready", until the new postmaster replaces it. A ready
// postmaster listens on the port of the 4th line, ours: it exits when it
// cannot bind it (a stranger holding it), so no other server answers there.
func (p *Postgres) pidFileReady(c *Child, port int) error {
	b, err := os.ReadFile(filepath.Join(p.dataDir, "postmaster.pid"))
	if err != nil {
		return err // not yet written, or removed by a postmaster giving up
	}
	lines := strings.Split(string(b), "\n")
	const portLine, statusLine = 4, 8 // LOCK_FILE_LINE_PORT, LOCK_FILE_LINE_PM_STATUS
	switch {
	case len(lines) < statusLine || lines[0] != strconv.Itoa(c.PID()) || strings.TrimSpace(lines[statusLine-1]) != "ready":
		return errors.New("postmaster.pid does not say ready yet")
	case strings.TrimSpace(lines[portLine-1]) != strconv.Itoa(port):
		return fmt.Errorf("postmaster.pid says port %s, not %d", strings.TrimSpace(lines[portLine-1]), port)
	}
	return nil
}

// findPostgresBin returns the directory holding both initdb and postgres:
// initdb runs the postgres binary next to it, so they must share one.
func findPostgresBin(binDir string) (string, error) {
	if binDir != "" {
		if hasPostgresBins(binDir) {
			return binDir, nil
		}
		return "", missingPostgres(binDir)
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		// Debian links only some tools into PATH; the real directory holds all.
		if real, err := filepath.EvalSymlinks(path); err == nil && hasPostgresBins(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasPostgresBins(filepath.Dir(path)) {
			return filepath.Dir(path), nil
		}
	}
	dirs, _ := filepath.Glob(pgVersionsGlob)
	slices.SortFunc(dirs, func(a, b string) int { // highest version first
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, d := range dirs {
		if hasPostgresBins(d) {
			return d, nil
		}
	}
	return "", missingPostgres("PATH", pgVersionsGlob)
}

func hasPostgresBins(dir string) bool {
	return IsExecutable(filepath.Join(dir, "initdb")) && IsExecutable(filepath.Join(dir, "postgres"))
}

func missingPostgres(searched ...string) *MissingBinaryError {
	return &MissingBinaryError{
		Binary:   "initdb, postgres",
		Searched: searched,
		Hint:     `install the Debian package "postgresql" (apt-get install postgresql), or pass --pg URL (RUNNER_PG_URL) to use a running server`,
		What:     "PostgreSQL server binaries (initdb, postgres)",
	}
}

// compareVersions orders version strings like "9.6" and "15" numerically.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// postgresCredential is who initdb and postgres run as: PostgreSQL refuses
// to run as root, so as root they run as the postgres system user.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	cred, err := SystemUser("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (%v): create it (useradd --system postgres) or run as a non-root user", err)
	}
	return cred, nil
}
