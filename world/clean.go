package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/servers"
)

// leftoverDB is a database the runner names, and nothing else: prefix,
// 8-hex run id, counter, side. (Each broker kind knows its own names.)
var leftoverDB = regexp.MustCompile(`^` + namePrefix + `_` + broker.RunIDForm + `_` + broker.CounterForm + `_[pc]$`)

// minStaleAge is how old the dir of a runner before leases must be before
// clean may take it for a killed run's.
const minStaleAge = 2 * time.Minute

// TempCleaned is what CleanTempDirs found and did on this machine.
type TempCleaned struct {
	Removed []string // dead runs' server dirs
	Killed  []string // processes dead runs left: services and all they started
	Live    []string // server dirs of live runs, left alone
	Refused []string // leases and dirs named as the runner's, not provably this user's runner's: "PATH is …: left alone"
}

// CleanTempDirs takes what runs whose runner was killed (SIGKILL leaves no
// time to clean up) left on this machine: the processes their services
// started, and their managed servers' drill-KIND-* dirs in the temp dir and
// the servers' tmpfs root. A run is dead when no process holds its lease
// file (servers/lease.go): a live run holds it whether its servers are up
// or not, so a scenario that stopped its own Redis or PostgreSQL keeps its
// dirs. Dirs made by a runner before leases (drill-KIND-N, no run id) have
// no lease to ask: those are taken, as before, when older than two minutes
// and no process works in them, and only if this user's runner made them
// (servers/leasecheck.go: nothing of another shape, no symlink, no file).
func CleanTempDirs() (TempCleaned, error) {
	rc, err := servers.CleanDeadRuns(servers.TempRoots())
	c := TempCleaned{Removed: rc.Removed, Killed: rc.Killed, Live: rc.Live, Refused: rc.Refused}
	if len(rc.Unleased) == 0 {
		return c, err
	}
	busy := busyDirs()
	for _, d := range rc.Unleased {
		// A young dir may belong to a server still being set up (its files
		// are copied before any process works in it).
		if fi, err := os.Lstat(d); err != nil || time.Since(fi.ModTime()) < minStaleAge || busy(d) {
			continue
		}
		if rerr := os.RemoveAll(d); rerr != nil {
			return c, errors.Join(err, rerr)
		}
		c.Removed = append(c.Removed, d)
	}
	return c, err
}

// busyDirs reads every process's working directory (/proc/*/cwd): a live
// server of a runner before leases works in its dir. (A stopped one does
// not: that is why leased dirs are judged by their lease.)
func busyDirs() func(dir string) bool {
	var cwds []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range procs {
		if cwd, err := os.Readlink(p); err == nil {
			cwds = append(cwds, cwd)
		}
	}
	return func(dir string) bool {
		for _, c := range cwds {
			if c == dir || strings.HasPrefix(c, dir+string(filepath.Separator)) {
				return true
			}
		}
		return false
	}
}

// Cleaned lists what Clean removed and what it left.
type Cleaned = broker.Cleaned

// Leases. A run holds one on every server it uses, from before it creates
// anything there until it has removed what it created; it goes with the
// run's connection (or, on Redis, expires soon after the run stopped
// refreshing it). Clean leaves the objects of a run whose lease is live.
// PostgreSQL's is a session named leaseName("_", ID); each broker kind's
// is its Conn's Lease.

// leaseName is run id's lease (broker.LeaseName).
func leaseName(sep, runID string) string { return broker.LeaseName(sep, runID) }

// runOf is the run id in a name of the runner's shape (broker.RunOf).
func runOf(name string) string { return broker.RunOf(name) }

// Clean removes every database, stream, queue and exchange the runner left
// on these servers (runs with --keep, or killed runs), recognised by the
// exact shape of the names it gives, except those of a run whose lease is
// live. pgURL "" skips PostgreSQL; brokerURLs maps a broker name to its
// server's URL. A database still in use is left alone and listed.
func Clean(ctx context.Context, pgURL string, brokerURLs map[string]string) (Cleaned, error) {
	var c Cleaned
	var errs []error
	if pgURL != "" {
		errs = append(errs, cleanDatabases(ctx, pgURL, &c))
	}
	for _, k := range broker.Kinds() {
		url := brokerURLs[k.Name]
		if url == "" {
			continue
		}
		got, err := cleanBroker(ctx, k, url)
		c.Add(got)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.Name, err))
		}
	}
	return c, errors.Join(errs...)
}

// cleanBroker connects to kind k's server at url as a run would and asks
// its connection to clean.
func cleanBroker(ctx context.Context, k *broker.Kind, url string) (Cleaned, error) {
	w := &World{conns: map[string]broker.Conn{}}
	h := worldHost{w, &Config{}, k.Name}
	conn, err := k.Open(ctx, h, url, nil)
	if err == nil {
		var c Cleaned
		c, err = conn.Clean(ctx)
		return c, errors.Join(err, w.Close())
	}
	return Cleaned{}, errors.Join(err, w.Close())
}

// lease takes the run's lease on every server given by URL (the runner's own
// go with the run) before anything is created there. Released last.
func (w *World) lease(ctx context.Context) error {
	if !w.managed {
		for i, url := range w.servers() {
			if w.sameServer(i) < i {
				continue
			}
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				return fmt.Errorf("PostgreSQL %s: %w", redact.URL(url), redact.Err(url, err))
			}
			cfg.RuntimeParams["application_name"] = leaseName("_", w.RunID)
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				return fmt.Errorf("PostgreSQL %s: lease: %w", redact.URL(url), redact.Err(url, err))
			}
			w.undo.add(func(ctx context.Context) error { return conn.Close(ctx) })
		}
	}
	if w.up != nil {
		return nil // each broker leases its server as it comes up (leaseBroker)
	}
	for b := range w.conns {
		if err := w.leaseBroker(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// leaseBroker takes the run's lease on broker b's server, before anything
// is created there.
func (w *World) leaseBroker(ctx context.Context, b string) error {
	release, err := w.brokerConns()[b].Lease(ctx, w.RunID)
	if err != nil {
		return fmt.Errorf("%s: lease: %w", b, err)
	}
	w.undo.add(release)
	return nil
}

func cleanDatabases(ctx context.Context, pgURL string, c *Cleaned) error {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("PostgreSQL %s: %w", redact.URL(pgURL), redact.Err(pgURL, err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A live run's lease is a session named after it; pg_stat_activity shows
	// every session's application_name to every role. (Advisory locks would
	// only be seen from the same database.)
	rows, err := conn.Query(ctx, `SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name LIKE $1`, namePrefix+`\_lease\_%`)
	if err != nil {
		return err
	}
	leases, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	rows, err = conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY datname`, namePrefix+`\_%`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	// A database with a session on it is in use: DROP DATABASE would wait
	// 5 s for the session to go before refusing (55006), per database.
	rows, err = conn.Query(ctx, `SELECT DISTINCT datname FROM pg_stat_activity WHERE datname LIKE $1`, namePrefix+`\_%`)
	if err != nil {
		return err
	}
	connected, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		if !leftoverDB.MatchString(name) {
			continue
		}
		if slices.Contains(leases, leaseName("_", runOf(name))) {
			c.Live = append(c.Live, name)
			continue
		}
		if slices.Contains(connected, name) {
			c.InUse = append(c.InUse, name)
			continue
		}
		// The CDC relay's slot is named after its producer database and
		// would refuse the drop: an inactive one of a dead run goes first
		// (an active one means a reader: the drop then fails "in use").
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, name); err != nil {
			return fmt.Errorf("drop the replication slot of %s: %w", name, err)
		} else if n, _ := slotCount(ctx, conn, name); n > 0 {
			c.InUse = append(c.InUse, name)
			continue
		}
		// No FORCE: a database someone is connected to is not ours to take.
		_, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize())
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "55006":
			c.InUse = append(c.InUse, name)
		case err != nil:
			return fmt.Errorf("drop %s: %w", name, err)
		default:
			c.Dropped = append(c.Dropped, name)
		}
	}
	return nil
}

// slotCount counts the replication slots named name (one still in use).
func slotCount(ctx context.Context, conn *pgx.Conn, name string) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&n)
	return n, err
}
