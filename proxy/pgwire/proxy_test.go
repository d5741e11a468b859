package pgwire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

var tableSeq atomic.Int64

// fixture is a proxy in front of the test server and two tables of its own.
type fixture struct {
	t      testing.TB
	proxy  *Proxy
	direct *pgx.Conn // straight to the server: the truth
	url    string
	a, b   string // table names
}

func newFixture(t *testing.T) *fixture { return newBenchFixture(t) }

func newBenchFixture(t testing.TB) *fixture { return newFixtureWith(t, DefaultLimits()) }

// newFixtureWith is a fixture whose proxy has limits of its own: a test
// lowers a cap on its proxy alone, and may run beside the others.
func newFixtureWith(t testing.TB, lim Limits) *fixture {
	t.Helper()
	ctx := context.Background()
	url := testservers.PG(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ListenWith(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	direct, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	n := tableSeq.Add(1)
	f := &fixture{t: t, proxy: p, direct: direct, url: url,
		a: fmt.Sprintf("pgwire_inbox_%d_%d", time.Now().UnixNano(), n), b: fmt.Sprintf("pgwire_other_%d_%d", time.Now().UnixNano(), n)}
	for _, tab := range []string{f.a, f.b} {
		if _, err := direct.Exec(ctx, "CREATE TABLE "+tab+" (id text PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+f.a+", "+f.b)
		direct.Close(context.Background())
	})
	return f
}

// client connects through the proxy.
func (f *fixture) client() *pgx.Conn { return f.clientB(f.t) }

func (f *fixture) clientB(t testing.TB) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(f.proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.TLSConfig, cfg.Fallbacks = host, uint16(p), nil, nil
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// rows counts the rows of a table as the server has them.
func (f *fixture) rows(table string) int {
	f.t.Helper()
	var n int
	if err := f.direct.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) arm(tr fault.Trigger) *Armed {
	f.t.Helper()
	a, err := f.proxy.Arm(tr)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// insertAndCommit writes one row into each table in one transaction.
func insertAndCommit(ctx context.Context, c *pgx.Conn, id string, tables ...string) error {
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, tab := range tables {
		if _, err := tx.Exec(ctx, "INSERT INTO "+tab+" (id) VALUES ($1)", id); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func TestRelaysUnarmed(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.client()
	for i := range 3 {
		if err := insertAndCommit(ctx, c, strconv.Itoa(i), f.a); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM "+f.a+" WHERE id = $1 OR $1 = ''", "").Scan(&n); err != nil || n != 3 {
		t.Fatalf("through the proxy: %d rows, %v; want 3", n, err)
	}
	if got := len(f.proxy.Events()); got != 3 {
		t.Errorf("events: %d commits, want 3", got)
	}
}

func TestKillHoldsTheCommitReply(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var killed atomic.Int32
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Kill, Kill: func() error { killed.Add(1); return nil }}})
	c := f.client()
	if err := insertAndCommit(ctx, c, "x", f.b); err != nil {
		t.Fatalf("a transaction that wrote only %s: %v", f.b, err)
	}
	err := insertAndCommit(ctx, c, "y", f.a)
	if err == nil {
		t.Fatal("the client saw its COMMIT succeed: the reply was not held")
	}
	<-a.Done()
	if !a.Fired() || a.Err() != nil || killed.Load() != 1 {
		t.Fatalf("fired=%v err=%v kills=%d; want fired once, no error", a.Fired(), a.Err(), killed.Load())
	}
	if got := f.rows(f.a); got != 1 {
		t.Errorf("%s has %d rows; the server committed before the kill, want 1", f.a, got)
	}
	ev := f.proxy.Events()
	if len(ev) != 2 || ev[1].Fault != "consumer_db.commit(table="+f.a+") nth=1 do=kill" || len(ev[1].Tables) != 1 {
		t.Errorf("events %+v: want the second commit struck, recorded in the system file's words, with its table", ev)
	}
}

// The runner hands each proxy the triggers of its own link: another's is
// refused, never armed to wait for a boundary this proxy never sees.
func TestArmRefusesAnotherLinksTrigger(t *testing.T) {
	f := newFixture(t)
	_, err := f.proxy.Arm(fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XADD"}, Action: fault.Action{Do: fault.Cut}})
	if err == nil || !strings.Contains(err.Error(), "broker.reply(XADD) is not a database link's trigger") {
		t.Errorf("a broker trigger on a PostgreSQL proxy: %v", err)
	}
}

func TestErrorRollsBackForReal(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Nth: 2, Action: fault.Action{Do: fault.Error}})
	c := f.client()
	if err := insertAndCommit(ctx, c, "1", f.a, f.b); err != nil {
		t.Fatal(err)
	}
	err := insertAndCommit(ctx, c, "2", f.a, f.b)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != InjectedSQLState {
		t.Fatalf("commit: %v; want SQLSTATE %s", err, InjectedSQLState)
	}
	<-a.Done()
	if got := f.rows(f.a) + f.rows(f.b); got != 2 {
		t.Errorf("%d rows; the second transaction rolled back, want 2", got)
	}
	if err := insertAndCommit(ctx, c, "3", f.a); err != nil {
		t.Errorf("the connection after the injected error: %v", err)
	}
}

func TestCutAndDelay(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Action: fault.Action{Do: fault.Delay, Delay: 150 * time.Millisecond}})
	c := f.client()
	start := time.Now()
	if err := insertAndCommit(ctx, c, "d", f.a); err != nil || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("delayed commit: %v after %v", err, time.Since(start))
	}
	<-a.Done()
	cut := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Action: fault.Action{Do: fault.Cut}})
	if err := insertAndCommit(ctx, c, "e", f.a); err == nil {
		t.Fatal("a cut commit succeeded on the client")
	}
	<-cut.Done()
	if got := f.rows(f.a); got != 2 {
		t.Errorf("%d rows, want 2: a cut after the server's commit keeps it", got)
	}
}

func TestExtendedProtocolCommit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Error}})
	c := f.client()
	if _, err := c.Prepare(ctx, "done", "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO "+f.a+" (id) VALUES ($1)", "p"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(ctx, "done")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != InjectedSQLState {
		t.Fatalf("prepared COMMIT: %v; want SQLSTATE %s", err, InjectedSQLState)
	}
	<-a.Done()
	if got := f.rows(f.a); got != 0 {
		t.Errorf("%d rows after the failed commit, want 0", got)
	}
	if _, err := c.Exec(ctx, "done"); err != nil {
		t.Errorf("the prepared statement after the fault: %v (a COMMIT outside a transaction only warns)", err)
	}
}

func TestStatementBoundary(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Statement, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Error}})
	c := f.client()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+f.b+" (id) VALUES ('s')"); err != nil {
		t.Fatalf("a statement on another table: %v", err)
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+f.a+" (id) VALUES ($1)", "s")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != InjectedSQLState {
		t.Fatalf("the insert into %s: %v; want SQLSTATE %s", f.a, err, InjectedSQLState)
	}
	<-a.Done()
	if err := tx.Commit(ctx); err == nil {
		t.Error("the transaction committed after its statement failed")
	}
	if got := f.rows(f.a) + f.rows(f.b); got != 0 {
		t.Errorf("%d rows, want 0: the whole transaction rolled back", got)
	}
	// The statement that struck is recorded with its command (the reply's
	// tag, never the SQL text) and its table, for the report's timeline.
	var struck []Event
	for _, e := range f.proxy.Events() {
		if e.Boundary == fault.Statement && e.Fault != "" {
			struck = append(struck, e)
		}
	}
	if len(struck) != 1 || struck[0].Command != "INSERT" || len(struck[0].Tables) != 1 || !strings.HasSuffix(struck[0].Tables[0], f.a) {
		t.Errorf("statement events %+v: want the INSERT into %s, struck", struck, f.a)
	}
}

func TestUnclassifiableIsNotApproximated(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Action: fault.Action{Do: fault.Error}})
	c := f.client()
	if _, err := c.Exec(ctx, "BEGIN; INSERT INTO "+f.a+" (id) VALUES ('m'); COMMIT"); err != nil {
		t.Fatalf("the multi-statement query must pass untouched: %v", err)
	}
	<-a.Done()
	var u *fault.Unclassifiable
	if a.Fired() || !errors.As(a.Err(), &u) {
		t.Fatalf("fired=%v err=%v; want not fired, *Unclassifiable", a.Fired(), a.Err())
	}
	if got := f.rows(f.a); got != 1 {
		t.Errorf("%d rows, want 1", got)
	}
}

func TestTLSIsUnclassifiable(t *testing.T) {
	f := newFixture(t)
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Action: fault.Action{Do: fault.Cut}})
	host, port, _ := net.SplitHostPort(f.proxy.Addr())
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@%s:%s/postgres?sslmode=require", host, port))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.ConnectConfig(context.Background(), cfg); err == nil {
		c.Close(context.Background())
		t.Fatal("a client requiring TLS connected through a plain-TCP proxy")
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the trigger was not failed")
	}
	var u *fault.Unclassifiable
	if !errors.As(a.Err(), &u) {
		t.Errorf("err %v, want *Unclassifiable", a.Err())
	}
}

// BenchmarkRoundTrip measures what the proxy adds to a query and to a small
// transaction, unarmed and with a commit trigger armed (that never strikes).
func BenchmarkRoundTrip(b *testing.B) {
	for _, mode := range []string{"direct", "proxy", "proxy-armed"} {
		b.Run(mode, func(b *testing.B) {
			f := newBenchFixture(b)
			c := f.direct
			if mode != "direct" {
				c = f.clientB(b)
			}
			if mode == "proxy-armed" {
				if _, err := f.proxy.Arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: "no_such_table"}, Action: fault.Action{Do: fault.Cut}}); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.Run("select1", func(b *testing.B) {
				for b.Loop() {
					if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("tx", func(b *testing.B) {
				i := 0
				for b.Loop() {
					i++
					if err := insertAndCommit(ctx, c, strconv.Itoa(i), f.a); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// An autocommit statement commits as it ends: the proxy runs it in a
// transaction of its own so that its commit can be held or failed.
func TestImplicitCommit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.client()
	fail := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Error}})
	if _, err := c.Exec(ctx, "INSERT INTO "+f.b+" (id) VALUES ($1)", "other"); err != nil {
		t.Fatalf("an autocommit insert into another table: %v", err)
	}
	_, err := c.Exec(ctx, "INSERT INTO "+f.a+" (id) VALUES ($1)", "x")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != InjectedSQLState {
		t.Fatalf("autocommit insert: %v; want SQLSTATE %s", err, InjectedSQLState)
	}
	<-fail.Done()
	if got := f.rows(f.a); got != 0 {
		t.Errorf("%d rows after the failed implicit commit, want 0", got)
	}
	var killed atomic.Int32
	kill := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Kill, Kill: func() error { killed.Add(1); return nil }}})
	if _, err := c.Exec(ctx, "INSERT INTO "+f.a+" (id) VALUES ('y')"); err == nil {
		t.Fatal("the client saw its autocommit insert succeed: the reply was not held")
	}
	<-kill.Done()
	if got := f.rows(f.a) + f.rows(f.b); got != 2 || killed.Load() != 1 {
		t.Errorf("%d rows, %d kills; want 2 (other, y: the server committed before the kill) and 1", got, killed.Load())
	}
	var tx pgx.Tx
	c2 := f.client()
	if tx, err = c2.Begin(ctx); err == nil {
		_, err = tx.Exec(ctx, "SELECT 1")
		_ = tx.Rollback(ctx)
	}
	if err != nil {
		t.Errorf("an explicit transaction after the wrap: %v", err)
	}
}

// A statement PostgreSQL refuses inside a transaction block still runs in
// autocommit while a commit trigger is armed: the proxy does not wrap it.
func TestVacuumIsNotWrapped(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Cut}})
	c := f.client()
	if _, err := c.Exec(ctx, "VACUUM "+f.a); err != nil {
		t.Fatalf("VACUUM through an armed proxy: %v", err)
	}
}

// A connection inside a transaction block (or a failed one not yet rolled
// back) counts as open until its COMMIT or ROLLBACK, or until it closes:
// what settling waits for.
func TestOpenTransactions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c, other := f.client(), f.client()
	if n := f.proxy.OpenTransactions(); n != 0 {
		t.Fatalf("idle: %d open, want 0", n)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+f.a+" (id) VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	if n := f.proxy.OpenTransactions(); n != 1 {
		t.Errorf("mid-transaction: %d open, want 1", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.proxy.OpenTransactions(); n != 0 {
		t.Errorf("committed: %d open, want 0", n)
	}
	otx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = otx.Exec(ctx, "SELECT 1/0") // failed: E until rolled back
	if n := f.proxy.OpenTransactions(); n != 1 {
		t.Errorf("a failed transaction: %d open, want 1", n)
	}
	other.Close(ctx)
	deadline := time.Now().Add(2 * time.Second)
	for f.proxy.OpenTransactions() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := f.proxy.OpenTransactions(); n != 0 {
		t.Errorf("its connection closed: %d open, want 0", n)
	}
}
