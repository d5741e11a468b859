package runner

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
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/servers"
)

// What the runner names, and nothing else: prefix, 8-hex run id, counter.
var (
	leftoverDB  = regexp.MustCompile(`^` + namePrefix + `_[0-9a-f]{8}_[0-9]+_[pc]$`)
	leftoverKey = regexp.MustCompile(`^` + namePrefix + `:[0-9a-f]{8}:[0-9]+(:dlq|:seen)?$`)
)

// minStaleAge is how old a managed server's dir must be before clean may
// take it for a killed run's.
const minStaleAge = 2 * time.Minute

// CleanTempDirs removes the temp dirs of managed servers whose runner was
// killed (SIGKILL leaves no time to clean up): a drill-pg-*, drill-redis-*,
// drill-nats-* or drill-rabbitmq-* dir in the temp dir or the servers' tmpfs
// root that no live process works in.
func CleanTempDirs() (removed []string, err error) {
	var dirs []string
	for _, root := range slices.Compact([]string{os.TempDir(), servers.TempRoot()}) {
		for _, pattern := range []string{"drill-pg-*", "drill-redis-*", "drill-nats-*", "drill-rabbitmq-*"} {
			m, err := filepath.Glob(filepath.Join(root, pattern))
			if err != nil {
				return nil, err
			}
			dirs = append(dirs, m...)
		}
	}
	busy := busyDirs()
	for _, d := range dirs {
		// A young dir may belong to a server still being set up (its files
		// are copied before any process works in it).
		if fi, err := os.Stat(d); err != nil || time.Since(fi.ModTime()) < minStaleAge || busy(d) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			return removed, err
		}
		removed = append(removed, d)
	}
	return removed, nil
}

// busyDirs reads every process's working directory (/proc/*/cwd): PostgreSQL
// runs in its data dir and Redis in its dir, so a live server is seen.
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
type Cleaned struct {
	Dropped []string // databases and stream keys removed
	InUse   []string // databases with open connections: a run in progress?
}

// Clean removes every database and stream key the runner ever left on these
// servers (runs with --keep, or killed runs), recognised by the exact shape of
// the names it gives. A database still in use is left alone and listed.
func Clean(ctx context.Context, pgURL, redisURL string) (Cleaned, error) {
	var c Cleaned
	var errs []error
	if pgURL != "" {
		errs = append(errs, cleanDatabases(ctx, pgURL, &c))
	}
	if redisURL != "" {
		errs = append(errs, cleanStreams(ctx, redisURL, &c))
	}
	return c, errors.Join(errs...)
}

func cleanDatabases(ctx context.Context, pgURL string, c *Cleaned) error {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("PostgreSQL %s: %w", redact.URL(pgURL), redact.Err(pgURL, err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY datname`, namePrefix+`\_%`)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, name := range names {
		if !leftoverDB.MatchString(name) {
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

func cleanStreams(ctx context.Context, redisURL string, c *Cleaned) error {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return fmt.Errorf("--redis %s: %w", redact.URL(redisURL), redact.Err(redisURL, err))
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, namePrefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if !leftoverKey.MatchString(key) {
			continue
		}
		if err := rdb.Del(ctx, key).Err(); err != nil {
			return err
		}
		c.Dropped = append(c.Dropped, key)
	}
	return iter.Err()
}
