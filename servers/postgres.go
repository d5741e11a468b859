package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
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

// serverSettings are test-friendly, none of them weakens durability
// (fsync, synchronous_commit and full_page_writes keep their defaults).
var serverSettings = []string{
	"listen_addresses=127.0.0.1",
	"shared_buffers=32MB",
	"max_connections=200",
	"huge_pages=off", // skip trying huge pages on every start
	"log_min_messages=warning",
}

// Postgres is a throwaway PostgreSQL server owned by this process.
type Postgres struct {
	URL  string // admin URL: postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable
	Port int
	Dir  string // temp dir holding data dir, socket dir and log

	binDir  string              // holds initdb and postgres
	dataDir string              // Dir/data
	sockDir string              // Dir/sock: Unix socket, kept out of /var/run/postgresql
	logPath string              // Dir/postgres.log
	name    string              // cluster_name, tells our server from a stranger on the port
	cred    *syscall.Credential // run as this user (nil: as ourselves)
	echo    io.Writer           // PostgresOptions.Log
	noCache bool

	process
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
	dir, err := os.MkdirTemp("", "drill-pg-*")
	if err != nil {
		return nil, fmt.Errorf("postgres temp dir: %w", err)
	}
	p := &Postgres{
		Dir:     dir,
		binDir:  binDir,
		dataDir: filepath.Join(dir, "data"),
		sockDir: filepath.Join(dir, "sock"),
		logPath: filepath.Join(dir, "postgres.log"),
		name:    filepath.Base(dir),
		cred:    cred,
		echo:    opts.Log,
		noCache: opts.NoCache,
	}
	if err := p.start(ctx); err != nil {
		p.shutdown(ctx, 0)
		return nil, err
	}
	return p, nil
}

// PID is the process id of the postmaster.
func (p *Postgres) PID() int { return p.pid() }

// Stop shuts the server down fast (SIGINT: abort transactions, checkpoint,
// exit) and removes Dir. If the server is not gone within 10s it is
// SIGKILLed and Stop says so in its error; if ctx is done first it is
// SIGKILLed quietly (the caller asked to hurry). Dir is removed either way.
// Stop is idempotent; concurrent calls wait for the first and share its result.
func (p *Postgres) Stop(ctx context.Context) error {
	return p.once(func() error { return p.shutdown(ctx, stopGrace) })
}

// Discard kills the server and its process group at once and removes Dir:
// for a caller that throws the data away, a clean shutdown's checkpoint is
// wasted time. It shares Stop's once: whichever comes first wins.
func (p *Postgres) Discard(ctx context.Context) error {
	return p.once(func() error { return p.shutdown(ctx, 0) })
}

// Kill SIGKILLs the postmaster and every backend (its process group), as a
// crash would; the data dir stays, so Start runs crash recovery from the WAL.
func (p *Postgres) Kill(ctx context.Context) error { return p.halt(ctx, 0) }

// Halt shuts the server down fast (SIGINT: abort transactions, checkpoint,
// exit); Start brings it back.
func (p *Postgres) Halt(ctx context.Context) error { return p.halt(ctx, stopGrace) }

func (p *Postgres) halt(ctx context.Context, grace time.Duration) error {
	c := p.take()
	if c == nil {
		return nil
	}
	var kids []int
	if grace == 0 && !c.exited() {
		// Every backend calls setsid(), so killing the postmaster's process
		// group misses them: freeze the postmaster (no new forks), then kill
		// its children with it, as a crash of the whole server would. The
		// postmaster is not reaped (we reap it), so its pid and its
		// children's parent pid are still its own.
		_ = c.cmd.Process.Signal(syscall.SIGSTOP)
		kids = childrenOf(c.pid())
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	c.stop(ctx, syscall.SIGINT, grace)
	// A restart on this data dir refuses to run while a killed backend is
	// still attached to the old shared memory.
	for deadline := time.Now().Add(stopGrace); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !slices.ContainsFunc(kids, running) {
			break
		}
	}
	return nil
}

// Start relaunches a killed or halted server on the same port and data dir:
// clients reconnect to the same URL, and after a kill the server first
// replays its WAL (crash recovery).
func (p *Postgres) Start(ctx context.Context) error {
	return relaunch(ctx, &p.process, &p.Port, p.launch)
}

// shutdown stops the server (grace 0: kill at once) and removes Dir.
func (p *Postgres) shutdown(ctx context.Context, grace time.Duration) error {
	var errs []error
	if c := p.current(); c != nil && c.stop(ctx, syscall.SIGINT, grace) && grace > 0 && ctx.Err() == nil {
		errs = append(errs, fmt.Errorf("postgres did not shut down within %v; killed it", grace))
	}
	if err := os.RemoveAll(p.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove postgres dir: %w", err))
	}
	return errors.Join(errs...)
}

// start creates the cluster and launches the server, on a new port if
// another process takes the one picked first.
func (p *Postgres) start(ctx context.Context) error {
	if err := p.initdb(ctx); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		err = p.launch(ctx, port)
		if err == nil || attempt == bindAttempts || !lostPortRace(err) {
			return err
		}
	}
}

// initdb prepares Dir for the server user and creates the cluster in it.
func (p *Postgres) initdb(ctx context.Context) error {
	if err := os.Mkdir(p.sockDir, 0o700); err != nil {
		return fmt.Errorf("postgres socket dir: %w", err)
	}
	if p.cred != nil {
		if err := chownTree(p.Dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return fmt.Errorf("hand %s to the postgres user: %w", p.Dir, err)
		}
	}
	cache := ""
	if !p.noCache {
		cache = cacheDir(p.binDir)
	}
	if restoreCache(cache, p.dataDir) {
		if p.cred != nil {
			return chownTree(p.dataDir, int(p.cred.Uid), int(p.cred.Gid))
		}
		return nil
	}
	// initdb's chatter goes to the log file only; a failure quotes its tail.
	f, out, err := openLog(p.logPath, nil)
	if err != nil {
		return fmt.Errorf("postgres log: %w", err)
	}
	offset := logSize(p.logPath)
	args := append([]string{"-D", p.dataDir}, initdbArgs...)
	cmd := newCmd(filepath.Join(p.binDir, "initdb"), args, p.Dir, out, p.cred)
	c, err := startChild("initdb", cmd, f)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		c.stop(ctx, syscall.SIGKILL, 0)
		return fmt.Errorf("initdb: %w", ctx.Err())
	}
	if c.err != nil {
		return &startError{what: "initdb failed", logPath: p.logPath, exit: c.err, output: logSince(p.logPath, offset)}
	}
	saveCache(p.dataDir, cache)
	return nil
}

// command builds the postmaster command for port.
func (p *Postgres) command(port int, out io.Writer) *exec.Cmd {
	args := []string{"-D", p.dataDir, "-p", strconv.Itoa(port), "-k", p.sockDir,
		"-c", "cluster_name=" + p.name}
	for _, s := range serverSettings {
		args = append(args, "-c", s)
	}
	return newCmd(filepath.Join(p.binDir, "postgres"), args, p.Dir, out, p.cred)
}

// launch starts the postmaster on port and waits until it accepts
// connections. On failure the process is gone when launch returns.
func (p *Postgres) launch(ctx context.Context, port int) error {
	f, out, err := openLog(p.logPath, p.echo)
	if err != nil {
		return fmt.Errorf("postgres log: %w", err)
	}
	offset := logSize(p.logPath)
	c, err := startChild("postgres", p.command(port, out), f)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		c.stop(ctx, syscall.SIGKILL, 0)
		return err
	}
	cfg.ConnectTimeout = probeTimeout
	probe := func(ctx context.Context) error { return p.probe(ctx, cfg) }
	if err := waitReady(ctx, c, p.logPath, offset, probe); err != nil {
		c.stop(ctx, syscall.SIGKILL, 0)
		return err
	}
	p.set(c, func() { p.Port, p.URL = port, url })
	return nil
}

// probe succeeds once our server answers a query. It checks cluster_name so a
// stranger that won the port is not mistaken for ours.
func (p *Postgres) probe(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var name string
	if err := conn.QueryRow(ctx, "SELECT current_setting('cluster_name')").Scan(&name); err != nil {
		return err
	}
	if name != p.name {
		return fmt.Errorf("port %d is served by another PostgreSQL (cluster %q)", cfg.Port, name)
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
	return isExecutable(filepath.Join(dir, "initdb")) && isExecutable(filepath.Join(dir, "postgres"))
}

func missingPostgres(searched ...string) *MissingBinaryError {
	return &MissingBinaryError{
		Binary:   "initdb, postgres",
		Searched: searched,
		Hint:     `install the Debian package "postgresql" (apt-get install postgresql), or pass --pg URL (RUNNER_PG_URL) to use a running server`,
		what:     "PostgreSQL server binaries (initdb, postgres)",
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
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user to run it as (%v): create it (useradd --system postgres) or run as a non-root user", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user ids: %w", err)
	}
	// Groups empty (not NoSetGroups): drop root's supplementary groups too.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// chownTree gives dir and everything in it to uid:gid.
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}
