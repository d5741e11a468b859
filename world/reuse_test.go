package world

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/internal/testservers"
)

// scratchDB creates a database with ddl on the test server and returns a
// connection to it; both go when the test ends.
func scratchDB(t *testing.T, ddl string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	url := testservers.PG(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("outboxdrill_reuse_test_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := pgx.ParseConfig(url)
	cfg.Database = name
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close(ctx)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(ctx)
	})
	if _, err := c.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	return c
}

const reuseDDL = `CREATE TABLE outbox (id bigserial PRIMARY KEY, event_id text UNIQUE, published bool NOT NULL DEFAULT false);
CREATE TABLE marks (outbox_id bigint REFERENCES outbox(id));
CREATE SEQUENCE tickets;
CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER touched BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION touch();`

// A reset database is what a new one would be: no rows, every sequence
// (owned or free-standing) at its start.
func TestResetIsANewDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := scratchDB(t, reuseDDL)
	sh, err := inspect(ctx, c)
	if err != nil || !sh.reusable {
		t.Fatalf("inspect: %+v, %v; want reusable", sh, err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO outbox (event_id) VALUES ('a'), ('b'); INSERT INTO marks SELECT id FROM outbox; SELECT nextval('tickets'), nextval('tickets')`); err != nil {
		t.Fatal(err)
	}
	if why, err := reset(ctx, c, sh); err != nil || why != "" {
		t.Fatalf("reset: %q, %v", why, err)
	}
	var rows, marks, id, ticket int64
	err = c.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox), (SELECT count(*) FROM marks)`).Scan(&rows, &marks)
	if err == nil {
		err = c.QueryRow(ctx, `INSERT INTO outbox (event_id) VALUES ('a') RETURNING id`).Scan(&id)
	}
	if err == nil {
		err = c.QueryRow(ctx, `SELECT nextval('tickets')`).Scan(&ticket)
	}
	if err != nil || rows != 0 || marks != 0 || id != 1 || ticket != 1 {
		t.Fatalf("after the reset: %d outbox and %d marks rows, the next id %d and ticket %d (want 0, 0, 1, 1); %v", rows, marks, id, ticket, err)
	}
}

// What a TRUNCATE cannot make new again is never reused: seed rows and a
// materialized view from the DDL; a table, a function or a large object a
// service made after it.
func TestResetRefusesWhatItCannotRenew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for ddl, want := range map[string]string{
		reuseDDL + `INSERT INTO outbox (event_id) VALUES ('seed');`:       "leaves rows in public.outbox",
		reuseDDL + `CREATE MATERIALIZED VIEW mv AS SELECT * FROM outbox;`: "public.mv (relkind m)",
	} {
		sh, err := inspect(ctx, scratchDB(t, ddl))
		if err != nil || sh.reusable || !strings.Contains(sh.why, want) {
			t.Errorf("inspect after %q: reusable %v, why %q, %v; want not reusable: %s", ddl[len(reuseDDL):], sh.reusable, sh.why, err, want)
		}
	}
	for _, later := range []string{
		`CREATE TABLE IF NOT EXISTS service_state (k text)`,
		`CREATE INDEX ON outbox (published)`,
		`CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		`SELECT lo_create(0)`,
	} {
		c := scratchDB(t, reuseDDL)
		sh, err := inspect(ctx, c)
		if err != nil || !sh.reusable {
			t.Fatalf("inspect: %+v, %v", sh, err)
		}
		if _, err := c.Exec(ctx, later); err != nil {
			t.Fatal(err)
		}
		if why, err := reset(ctx, c, sh); err != nil || why == "" {
			t.Errorf("reset after %q: %q, %v; want refused", later, why, err)
		}
	}
}

// A pool that goes back with its database keeps its connections (the
// same backends: no new fork for the next scenario), and what a scenario's
// SQL left in a session is gone: a setting, an advisory lock, a temporary
// table. A pool with a connection in use is not reset through, and a kept
// pool holds one connection.
func TestResetPoolKeepsItsBackendsAndClearsTheirSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := scratchDB(t, reuseDDL)
	sh, err := inspect(ctx, c)
	if err != nil || !sh.reusable {
		t.Fatalf("inspect: %+v, %v", sh, err)
	}
	cfg, err := pgxpool.ParseConfig(c.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = c.Config().Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var before int
	err = pool.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT set_config('application_name', 'left-behind', false), pg_advisory_lock(42)) s`).Scan(&before)
	if err == nil {
		_, err = pool.Exec(ctx, `CREATE TEMP TABLE scratch (x int); INSERT INTO outbox (event_id) VALUES ('a')`)
	}
	if err != nil {
		t.Fatal(err)
	}
	held, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := pool.Acquire(ctx) // a second connection, idle at the resets
	if err != nil {
		t.Fatal(err)
	}
	second.Release()
	if why, err := resetPool(ctx, pool, sh); !errors.Is(err, errBusyPool) || why != "" {
		t.Errorf("reset with a connection in use: %q, %v; want %v", why, err, errBusyPool)
	}
	held.Release()
	if why, err := resetPool(ctx, pool, sh); err != nil || why != "" {
		t.Fatalf("reset: %q, %v", why, err)
	}
	if n := pool.Stat().TotalConns(); n != 1 {
		t.Errorf("the reset pool holds %d connections; want the one kept", n)
	}
	var after int
	var app string
	var locks, temps, rows int64
	err = pool.QueryRow(ctx, `SELECT pg_backend_pid(), current_setting('application_name'),
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
		(SELECT count(*) FROM pg_class WHERE relname = 'scratch' AND relpersistence = 't'),
		(SELECT count(*) FROM outbox)`).Scan(&after, &app, &locks, &temps, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if after != before || app == "left-behind" || locks != 0 || temps != 0 || rows != 0 {
		t.Errorf("after the reset: backend %d (was %d), application_name %q, %d advisory lock(s), %d temporary table(s), %d outbox row(s); want the same backend and a clean session", after, before, app, locks, temps, rows)
	}
}

// A server keeps at most keepCap pools with its free databases: one more
// goes back without its pool (closed), and taking a kept one makes room.
func TestFreeDatabasesKeepPoolsWithinTheCap(t *testing.T) {
	ctx := context.Background()
	newPool := func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, "postgres://u@127.0.0.1:1/db") // never dialled: no connection until one is used
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	closed := func(p *pgxpool.Pool) bool {
		_, err := p.Acquire(ctx)
		return err != nil && strings.Contains(err.Error(), "closed pool")
	}
	var s sysDBs
	s.setKeepCap(1)
	a, b, c := newPool(), newPool(), newPool()
	s.give("k0", 0, freeDB{name: "a", pool: a})
	s.give("k0", 0, freeDB{name: "b", pool: b})
	s.give("k1", 1, freeDB{name: "c", pool: c}) // another server: its own cap
	if closed(a) || !closed(b) || closed(c) {
		t.Errorf("closed: a %v, b %v, c %v; want only b, past server 0's cap", closed(a), closed(b), closed(c))
	}
	if db := s.take("k0", 0); db.name != "b" || db.pool != nil {
		t.Fatalf("took %+v; want b, the last given, without its pool", db)
	}
	if db := s.take("k0", 0); db.name != "a" || db.pool != a {
		t.Fatalf("took %+v; want a with its pool", db)
	}
	d := newPool()
	s.give("k0", 0, freeDB{name: "d", pool: d})
	if closed(d) {
		t.Error("a pool given after the kept one was taken was closed; want kept")
	}
	a.Close()
	c.Close()
	d.Close()
}
