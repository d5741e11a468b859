package world

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A system scenario's databases are made by CREATE DATABASE and the team's
// DDL (50–270 ms a side, measured here; a checkpoint each on the runner's
// own server), and a team's tables are not the reference pipeline's, whose
// pairs the pool resets with their own DELETEs. So a system database is
// reset by the fastest sound means measured: TRUNCATE of every table it
// holds and a restart of every sequence (3–25 ms), and handed to the next
// scenario of the same DDL on the same server — but only when that gives
// exactly what a new one would (the rule, reuseRule):
//   - right after the DDL every table was empty (no seed rows, which a
//     TRUNCATE would lose), and it holds no materialized view or foreign
//     table (whose contents TRUNCATE does not reset);
//   - at the reset, the catalog is the one the DDL made (a service that
//     created a table, an index or a function at its start leaves a
//     database a new one would not be), and it holds no prepared
//     transaction, replication slot or large object;
//   - the reset's TRUNCATE got its locks within resetLockTimeout.
// Anything else is dropped (on a server the user gave; on the runner's own
// it goes with the server) and the next scenario gets a new database.
//
// The runner's own pool of a database goes back with it, its connections
// open: a PostgreSQL backend costs a fork and its caches at every start
// (on a paravirtualized machine measured here, starting and ending
// backends was a third of an exploration's CPU), and a scenario's own pool
// and its reset's connection were two of the seven backends a reference
// point started. What a connection's session holds is the runner's own
// (its prepared statements, which name no table of the scenario's rows);
// what a scenario's SQL could have left in it — a setting, an advisory
// lock, a temporary table, a cursor, a LISTEN — goes at the reset
// (sessionReset). A pool whose server was restarted since is not reused
// (its connections are to the dead process), nor one with a connection
// still in use.

// dbShape is what a side's database looks like right after its DDL.
type dbShape struct {
	reusable bool
	why      string // not reusable: why
	catalog  string // the catalog's fingerprint (catalogQuery)
	tables   []string
	seqs     []string
}

// reuseKey names the databases one may stand for another: the same
// server, the same DDL.
func reuseKey(srv int, ddl string) string { return fmt.Sprintf("%d\x00%s", srv, ddl) }

// freeDB is a database reset and free, with the runner's pool of it
// (nil: none kept) and the server generation its connections are of
// (World.pgGen).
type freeDB struct {
	name string
	pool *pgxpool.Pool
	gen  int64
}

// A pool kept with a free database holds one connection, and each server
// keeps at most one per parallel scenario (sysDBs.keepCap): a system
// scenario's pool has systemPoolConns, one less than the pair pools'
// pairPoolConns the connection budget counts per parallel scenario, so
// what runs and what is kept stay within the budget (fitBudget) together,
// however many free databases of however many schemas there are.
const systemPoolConns = pairPoolConns - 1

// sysDBs are the system databases reset and free, by reuseKey, and the
// shape of a new one of each key.
type sysDBs struct {
	mu sync.Mutex
	// keepCap is how many kept pools each server may hold (the run's
	// parallel scenarios; 0 keeps none), kept how many it holds.
	keepCap int
	kept    map[int]int
	free    map[string][]freeDB
	shapes  map[string]*dbShape
	// resets are the resets and drops under way (World.Recycle); errs
	// what their drops met, said when the world closes.
	resets sync.WaitGroup
	errs   []error
}

func (s *sysDBs) failed(err error) {
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
}

// take is a free database of key on server srv (its name "" for none).
func (s *sysDBs) take(key string, srv int) freeDB {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.free[key]
	if len(l) == 0 {
		return freeDB{}
	}
	s.free[key] = l[:len(l)-1]
	db := l[len(l)-1]
	if db.pool != nil {
		s.kept[srv]--
	}
	return db
}

// give frees db, of key on server srv, with its pool while the server
// keeps fewer than keepCap (else the pool is closed).
func (s *sysDBs) give(key string, srv int, db freeDB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free == nil {
		s.free, s.kept = map[string][]freeDB{}, map[int]int{}
	}
	if db.pool != nil && s.kept[srv] >= s.keepCap {
		db.pool.Close()
		db.pool = nil
	}
	if db.pool != nil {
		s.kept[srv]++
	}
	s.free[key] = append(s.free[key], db)
}

func (s *sysDBs) shape(key string) *dbShape {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shapes[key]
}

func (s *sysDBs) setShape(key string, sh *dbShape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shapes == nil {
		s.shapes = map[string]*dbShape{}
	}
	if s.shapes[key] == nil {
		s.shapes[key] = sh
	}
}

// drain waits for the resets under way and empties the free lists, their
// pools closed: what close drops, with what the resets' drops met.
func (s *sysDBs) drain() (map[string][]string, error) {
	s.resets.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]string{}
	for key, dbs := range s.free {
		for _, db := range dbs {
			if db.pool != nil {
				db.pool.Close()
			}
			out[key] = append(out[key], db.name)
		}
	}
	err := errors.Join(s.errs...)
	s.free, s.kept, s.errs = nil, nil, nil
	return out, err
}

// userSchemas selects what the team's DDL made, not the server's own.
const userSchemas = `n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp\_%'`

// catalogQuery fingerprints what a database holds besides rows: its
// relations (tables, indexes, sequences, views) with their columns, its
// functions and triggers, and its large objects.
const catalogQuery = `SELECT coalesce(md5(string_agg(x, ';' ORDER BY x)), '') || ':' || (SELECT count(*) FROM pg_largeobject_metadata) FROM (
  SELECT format('r %s.%s %s %s', n.nspname, c.relname, c.relkind,
    (SELECT string_agg(a.attname || ' ' || a.atttypid::text, ',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)) AS x
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE ` + userSchemas + `
  UNION ALL SELECT format('f %s.%s(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid))
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE ` + userSchemas + `
  UNION ALL SELECT format('t %s %s', t.tgrelid::regclass, t.tgname) FROM pg_trigger t WHERE NOT t.tgisinternal) s`

// querier is a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// inspect reads the shape of a database its DDL just made.
func inspect(ctx context.Context, c querier) (*dbShape, error) {
	sh := &dbShape{}
	rows, err := c.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname), c.relkind::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'S', 'm', 'f') AND `+userSchemas+` ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	var kinds []string
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			return nil, err
		}
		switch kind {
		case "r", "p":
			sh.tables = append(sh.tables, name)
		case "S":
			sh.seqs = append(sh.seqs, name)
		default:
			kinds = append(kinds, fmt.Sprintf("%s (relkind %s)", name, kind))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(kinds) > 0 {
		sh.why = "it holds what TRUNCATE does not reset: " + strings.Join(kinds, ", ")
		return sh, nil
	}
	for _, t := range sh.tables {
		var rows bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+t+")").Scan(&rows); err != nil {
			return nil, err
		}
		if rows {
			sh.why = fmt.Sprintf("its DDL leaves rows in %s, which a TRUNCATE would lose", t)
			return sh, nil
		}
	}
	if err := c.QueryRow(ctx, catalogQuery).Scan(&sh.catalog); err != nil {
		return nil, err
	}
	sh.reusable = true
	return sh, nil
}

// resetLockTimeout bounds the reset's wait for its locks: a service's
// backend still holding one after its client went is let go by a drop.
const resetLockTimeout = 5 * time.Second

// reset empties a database of shape sh for the next scenario, or says why
// it cannot stand for a new one (then it is dropped).
func reset(ctx context.Context, c querier, sh *dbShape) (why string, err error) {
	var catalog string
	var prepared, slots int
	err = c.QueryRow(ctx, `SELECT (`+catalogQuery+`),
		(SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database())::int,
		(SELECT count(*) FROM pg_replication_slots WHERE database = current_database())::int`).Scan(&catalog, &prepared, &slots)
	switch {
	case err != nil:
		return "", err
	case catalog != sh.catalog:
		return "its catalog is no longer the one its DDL made (a service created or changed an object)", nil
	case prepared > 0 || slots > 0:
		return fmt.Sprintf("it holds %d prepared transaction(s) and %d replication slot(s)", prepared, slots), nil
	}
	var q strings.Builder
	fmt.Fprintf(&q, "SET lock_timeout = %d; ", resetLockTimeout.Milliseconds())
	if len(sh.tables) > 0 {
		fmt.Fprintf(&q, "TRUNCATE %s RESTART IDENTITY CASCADE; ", strings.Join(sh.tables, ", "))
	}
	for _, s := range sh.seqs {
		fmt.Fprintf(&q, "ALTER SEQUENCE %s RESTART; ", s)
	}
	q.WriteString("RESET lock_timeout")
	if _, err := c.Exec(ctx, q.String()); err != nil {
		return "", err
	}
	return "", nil
}

// giveBack resets each side of a system scenario's pair that may stand
// for a new one, its services stopped, and gives it back for the next
// scenario of its key with the scenario's own pool (lent to it by
// Recycle), or a new one's connections when that pool cannot go along;
// a side that cannot be reset is not given back (its drop runs).
func (w *World) giveBack(ctx context.Context, iso *Isolation) {
	for side, db := range []string{iso.Producer, iso.Consumer} {
		key := iso.reuse[side]
		lent := iso.lent[side]
		if key == "" {
			if lent != nil {
				lent.Close()
			}
			continue
		}
		gen := w.pgGen[iso.set].Load()
		if lent != nil && iso.pgGen == gen {
			why, err := resetPool(ctx, lent, w.sysdb.shape(key))
			if err == nil && why == "" {
				iso.given[side] = true
				w.sysdb.give(key, iso.srv(side), freeDB{name: db, pool: lent, gen: gen})
				continue
			}
			lent.Close()
			if err == nil {
				continue // not reusable: dropped
			}
			// Busy, or the reset failed on the kept connection: a new one's may do.
		} else if lent != nil {
			lent.Close()
		}
		pool, err := w.pool(ctx, iso.srv(side), db)
		if err != nil {
			continue
		}
		why, err := reset(ctx, pool, w.sysdb.shape(key))
		pool.Close()
		if err == nil && why == "" {
			iso.given[side] = true
			w.sysdb.give(key, iso.srv(side), freeDB{name: db})
		}
	}
}

// errBusyPool is resetPool's error for a pool with a connection still in
// use: the database may still be reset through a new one.
var errBusyPool = errors.New("a connection of its pool is still in use")

// sessionReset clears what a scenario's SQL could have left in one of the
// runner's sessions (DISCARD ALL but for the prepared statements, which
// are the runner's own, and without DISCARD ALL's ban on a transaction
// block, so that it is one round trip).
const sessionReset = "RESET ALL; SET SESSION AUTHORIZATION DEFAULT; CLOSE ALL; UNLISTEN *; " +
	"SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES"

// resetPool resets a database through the scenario's own pool, every one
// of whose connections must be idle, clears the session of the one it
// keeps and closes the others (a kept pool holds one: systemPoolConns).
func resetPool(ctx context.Context, pool *pgxpool.Pool, sh *dbShape) (why string, err error) {
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for i, c := range conns {
			if err != nil || i > 0 { // in an unknown state, or one more than kept
				_ = c.Hijack().Close(ctx) // out of the pool at once
				continue
			}
			c.Release()
		}
	}()
	if len(conns) == 0 || int32(len(conns)) != pool.Stat().TotalConns() {
		return "", errBusyPool
	}
	if why, err = reset(ctx, conns[0], sh); err != nil || why != "" {
		return why, err
	}
	_, err = conns[0].Exec(ctx, sessionReset)
	return "", err
}

// dropFreeSystemDBs drops the databases kept for reuse when the world
// closes (on the runner's own server they go with it).
func (w *World) dropFreeSystemDBs(ctx context.Context) error {
	free, err := w.sysdb.drain()
	errs := []error{err}
	for key, names := range free {
		var srv int
		if _, err := fmt.Sscanf(key, "%d", &srv); err != nil || w.managed {
			continue
		}
		for _, db := range names {
			errs = append(errs, w.dropDB(ctx, srv, db))
		}
	}
	return errors.Join(errs...)
}

// setKeepCap sets how many kept pools each server may hold.
func (s *sysDBs) setKeepCap(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keepCap = n
}
