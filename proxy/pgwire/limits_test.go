package pgwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// raw is a client speaking the protocol by hand, started and
// authenticated.
func (f *fixture) raw(t *testing.T) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	cfg, err := pgx.ParseConfig(f.url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fe := pgproto3.NewFrontend(c, c)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": cfg.User, "database": cfg.Database}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			return c, fe
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup: %s %s", m.Code, m.Message)
		case *pgproto3.AuthenticationCleartextPassword, *pgproto3.AuthenticationMD5Password, *pgproto3.AuthenticationSASL:
			t.Skip("the raw client speaks trust authentication only")
		}
	}
}

// fatal reads up to the proxy's closing: the ErrorResponse it sent, if
// any.
func fatal(t *testing.T, fe *pgproto3.Frontend) *pgproto3.ErrorResponse {
	t.Helper()
	var last *pgproto3.ErrorResponse
	for {
		m, err := fe.Receive()
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "connection reset") {
				t.Fatalf("the proxy never closed: %v", err)
			}
			return last
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			e := *e
			last = &e
		}
	}
}

func header(typ byte, n int) []byte { return binary.BigEndian.AppendUint32([]byte{typ}, uint32(n)) }

// A header claiming 2^31-1 bytes made the proxy allocate 2 GB before a
// byte of the message came.
func TestHugeHeaderIsRefusedUpFront(t *testing.T) {
	f := newFixture(t)
	var e *pgproto3.ErrorResponse
	n := testutil.Allocated(func() {
		c, fe := f.raw(t)
		c.Write(header('Q', 1<<31-1))
		c.Write([]byte("SELECT 1"))
		e = fatal(t, fe)
	})
	if e == nil || e.Code != "54000" || e.Severity != "FATAL" || !strings.Contains(e.Message, "a client message of 2147483643 bytes is over the proxy's cap of 67108864 bytes") {
		t.Errorf("got %+v, want FATAL 54000 naming the cap", e)
	}
	if n > 16<<20 {
		t.Errorf("the attack allocated %d MB, want under 16", n>>20)
	}
}

// A message under the cap costs what arrived of it, not what its header
// announced.
func TestMessageCostsWhatArrived(t *testing.T) {
	f := newFixture(t)
	n := testutil.Allocated(func() {
		c, fe := f.raw(t)
		c.Write(header('Q', MaxMessage+4))
		c.Write([]byte(strings.Repeat(" ", 1<<20)))
		c.(*net.TCPConn).CloseWrite()
		fatal(t, fe)
	})
	if n > 16<<20 {
		t.Errorf("1 MB of a 64 MB message allocated %d MB, want under 16", n>>20)
	}
}

// A query under the cap passes whole; one over it is refused with 54000.
func TestMessageCap(t *testing.T) {
	t.Parallel()
	maxMessage := 1 << 20
	f := lowered(t, func(l *Limits) { l.MaxMessage = maxMessage })
	ctx := context.Background()
	c := f.client()
	var one int
	if err := c.QueryRow(ctx, strings.Repeat(" ", maxMessage-100)+"SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&one); err != nil || one != 1 {
		t.Fatalf("a query just under the cap: %v", err)
	}
	_, err := c.Exec(ctx, strings.Repeat(" ", maxMessage)+"SELECT 1", pgx.QueryExecModeSimpleProtocol)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "54000" {
		t.Errorf("a query over the cap: %v, want SQLSTATE 54000", err)
	}
}

// The server's messages have the same cap: a row wider than it ends the
// connection with 54000 instead of being decoded whole.
func TestServerMessageCap(t *testing.T) {
	t.Parallel()
	maxMessage := 1 << 20
	f := lowered(t, func(l *Limits) { l.MaxMessage = maxMessage })
	ctx := context.Background()
	c := f.client()
	var s string
	if err := c.QueryRow(ctx, "SELECT repeat('x', $1)", maxMessage-100).Scan(&s); err != nil || len(s) != maxMessage-100 {
		t.Fatalf("a row just under the cap: %d bytes, %v", len(s), err)
	}
	err := c.QueryRow(ctx, "SELECT repeat('x', $1)", maxMessage).Scan(&s)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Message, "a server message of") {
		t.Errorf("a row over the cap: %v, want SQLSTATE 54000", err)
	}
}

// connect connects through the proxy, returning the error.
func (f *fixture) connect() (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(f.proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.TLSConfig, cfg.Fallbacks = host, uint16(p), nil, nil
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// The proxy opened a server connection for every client, without a cap:
// 500 clients met the server's "too many clients". Past the proxy's cap,
// a client is refused as PostgreSQL refuses one.
func TestConnectionCap(t *testing.T) {
	f := newFixture(t)
	// Clients that connect and say nothing hold their slots (and open no
	// server connection).
	idle := make([]net.Conn, 0, listen.MaxConns)
	for range listen.MaxConns {
		c, err := net.Dial("tcp", f.proxy.Addr())
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); f.proxy.Connections() < listen.MaxConns; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy took %d connections", f.proxy.Connections())
		}
	}
	_, err := f.connect()
	var pe *pgconn.PgError
	want := fmt.Sprintf("outboxdrill proxy: too many client connections (cap %d)", listen.MaxConns)
	if !errors.As(err, &pe) || pe.Code != "53300" || pe.Message != want || pe.Severity != "FATAL" {
		t.Fatalf("client %d: %v, want FATAL 53300 %q", listen.MaxConns+1, err, want)
	}
	idle[0].Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := f.connect()
		if err == nil {
			c.Close(context.Background())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a client left: %v", err)
		}
	}
}

// lowered is a fixture whose proxy has the default limits as lower
// changes them.
func lowered(t *testing.T, lower func(*Limits)) *fixture {
	lim := DefaultLimits()
	lower(&lim)
	return newFixtureWith(t, lim)
}

// A reply over the held cap is passed on instead of held: the client gets
// all of it, and the trigger that waited for it fails as unclassifiable.
func TestHeldReplyOverTheCap(t *testing.T) {
	t.Parallel()
	f := lowered(t, func(l *Limits) { l.MaxHeldReply = 1 << 20 })
	ctx := context.Background()
	c := f.client()
	wide := "INSERT INTO " + f.a + " (id) VALUES ($1) RETURNING repeat('y', 3000000)"

	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Statement, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Cut}})
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := tx.QueryRow(ctx, wide, "1").Scan(&s); err != nil || len(s) != 3000000 {
		t.Fatalf("in a transaction: %d bytes, %v", len(s), err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var u *fault.Unclassifiable
	if a.Fired() || !errors.As(a.Err(), &u) {
		t.Errorf("statement trigger: fired=%v err=%v, want unclassifiable", a.Fired(), a.Err())
	}

	// Autocommit: the proxy wraps the statement in a transaction of its
	// own, and the client still sees it end outside one.
	b := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Cut}})
	if err := c.QueryRow(ctx, wide, "2").Scan(&s); err != nil || len(s) != 3000000 {
		t.Fatalf("autocommit: %d bytes, %v", len(s), err)
	}
	if b.Fired() || !errors.As(b.Err(), &u) {
		t.Errorf("commit trigger: fired=%v err=%v, want unclassifiable", b.Fired(), b.Err())
	}
	if st := c.PgConn().TxStatus(); st != 'I' {
		t.Errorf("after an autocommit statement: status %q, want I", st)
	}
	if got := f.rows(f.a); got != 2 {
		t.Errorf("%d rows, want 2", got)
	}
}

// An extended batch that grows past its cap before its Sync goes on to
// the server; its trigger fails as unclassifiable.
func TestBatchOverTheCap(t *testing.T) {
	t.Parallel()
	f := lowered(t, func(l *Limits) { l.MaxBatch = 64 << 10 })
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Statement, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Cut}})
	c, fe := f.raw(t)
	fe.Send(&pgproto3.Query{String: "BEGIN"})
	fe.Send(&pgproto3.Parse{Name: "ins", Query: "INSERT INTO " + f.a + " (id) VALUES ($1) /* " + strings.Repeat("x", 1000) + " */"})
	const rows = 200
	for i := range rows {
		fe.Send(&pgproto3.Bind{PreparedStatement: "ins", Parameters: [][]byte{[]byte(strconv.Itoa(i))}})
		fe.Send(&pgproto3.Execute{})
		fe.Send(&pgproto3.Parse{Query: "SELECT 1 /* " + strings.Repeat("x", 1000) + " */"})
	}
	fe.Send(&pgproto3.Sync{})
	fe.Send(&pgproto3.Query{String: "COMMIT"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	ready := 0
	for ready < 3 {
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			ready++
		case *pgproto3.ErrorResponse:
			t.Fatalf("%s %s", m.Code, m.Message)
		}
	}
	c.Close()
	var u *fault.Unclassifiable
	if a.Fired() || !errors.As(a.Err(), &u) || !strings.Contains(a.Err().Error(), "before its Sync") {
		t.Errorf("trigger: fired=%v err=%v, want unclassifiable", a.Fired(), a.Err())
	}
	if got := f.rows(f.a); got != rows {
		t.Errorf("%d rows, want %d", got, rows)
	}
}

// Past the bytes of prepared statements the proxy remembers, it no longer
// knows what an Execute runs: triggers fail as unclassifiable rather than
// miss a COMMIT.
func TestPreparedOverTheCap(t *testing.T) {
	t.Parallel()
	f := lowered(t, func(l *Limits) { l.MaxPrepared = 64 << 10 })
	ctx := context.Background()
	c := f.client()
	for i := range 100 {
		if _, err := c.Prepare(ctx, fmt.Sprintf("s%d", i), fmt.Sprintf("SELECT %d /* %s */", i, strings.Repeat("x", 1000))); err != nil {
			t.Fatal(err)
		}
	}
	a := f.arm(fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: f.a}, Action: fault.Action{Do: fault.Cut}})
	if err := insertAndCommit(ctx, c, "1", f.a); err != nil {
		t.Fatal(err)
	}
	var u *fault.Unclassifiable
	if a.Fired() || !errors.As(a.Err(), &u) {
		t.Errorf("trigger: fired=%v err=%v, want unclassifiable", a.Fired(), a.Err())
	}
}

// TestAHalfClosedClientGetsItsReplies: a query, then the client's writing
// side shut down: its result still comes (the proxy closed both ways at
// its EOF).
func TestAHalfClosedClientGetsItsReplies(t *testing.T) {
	f := newFixture(t)
	c, fe := f.raw(t)
	fe.Send(&pgproto3.Query{String: "SELECT 42"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("no row before the end: %v", err)
		}
		if row, ok := m.(*pgproto3.DataRow); ok {
			if string(row.Values[0]) != "42" {
				t.Errorf("row %q", row.Values[0])
			}
			return
		}
	}
}

// limitedFixture is a proxy to the test server with limits of its own
// (no tables: for the limits' tests).
func limitedFixture(t *testing.T, lim Limits) *fixture {
	t.Helper()
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
	return &fixture{t: t, proxy: p, url: url}
}

// Issue 41: every byte a client makes the proxy hold is on its account,
// small messages too (the MessageBudget counted only those of 1 MiB or
// more): a message costs its bytes and the copies made of it, within the
// connection's cap, refused past it with 54000 naming the cap.
func TestEveryMessageIsOnTheAccount(t *testing.T) {
	f := limitedFixture(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 64 << 20, Handshake: time.Minute}})
	ctx := context.Background()
	c := f.client()
	var one int
	if err := c.QueryRow(ctx, strings.Repeat(" ", 200<<10)+"SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&one); err != nil || one != 1 {
		t.Fatalf("a query of 200 kB (600 kB with its copies) under a cap of 1 MB: %v", err)
	}
	_, err := c.Exec(ctx, strings.Repeat(" ", 400<<10)+"SELECT 1", pgx.QueryExecModeSimpleProtocol)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Message, "cap of 1048576 bytes for one connection") {
		t.Errorf("a query of 400 kB (1.2 MB with its copies): %v, want 54000 naming the connection's cap", err)
	}
	testutil.Within(t, 5*time.Second, "the account emptied", func() {
		for f.proxy.acct.Used() != 0 {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Connections each under their cap stop at the proxy's, all connections
// together; the others' small queries still pass, and a closed
// connection's bytes come back.
func TestConnectionsStopAtTheTotalCap(t *testing.T) {
	f := limitedFixture(t, Limits{Limits: listen.Limits{ConnBytes: 4 << 20, TotalBytes: 6 << 20, Handshake: time.Minute}})
	a, _ := f.raw(t)
	a.Write(header('Q', 4<<20))
	a.Write([]byte(strings.Repeat(" ", 3<<20)))
	testutil.Within(t, 10*time.Second, "3 MB arrived", func() {
		for f.proxy.acct.Used() < 3<<20 {
			time.Sleep(10 * time.Millisecond)
		}
	})
	b, fe := f.raw(t)
	b.Write(header('Q', 1<<20+4))
	b.Write([]byte(strings.Repeat(" ", 1<<20)))
	if e := fatal(t, fe); e == nil || e.Code != "54000" || !strings.Contains(e.Message, "cap of 6291456 bytes for all its connections at once") {
		t.Errorf("got %+v, want 54000 naming the total's cap", e)
	}
	var one int
	small := f.client()
	if err := small.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Errorf("a small query beside them: %v", err)
	}
	small.Close(context.Background()) // it holds the statements it prepared
	a.Close()
	testutil.Within(t, 5*time.Second, "the account emptied", func() {
		for f.proxy.acct.Used() != 0 {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// The startup is timed by Limits.Handshake (StartupTimeout by default), and
// a configured Idle cuts a client silent while the proxy owes it nothing,
// never one waiting for its answer.
func TestStartupAndIdleAreTimed(t *testing.T) {
	if d := DefaultLimits(); d.Handshake != StartupTimeout || d.Idle != 0 {
		t.Errorf("default limits %+v: want the startup timed, idle not", d)
	}
	f := limitedFixture(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 1 << 20, Handshake: time.Second, Idle: 1500 * time.Millisecond}})
	nc, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a client that never started: %v after %v, want closed after about 1 s", err, time.Since(start))
	}
	c := f.client()
	if _, err := c.Exec(context.Background(), "SELECT pg_sleep(2.5)"); err != nil {
		t.Errorf("a client waiting 2.5 s for its answer was cut: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := c.Exec(context.Background(), "SELECT 1"); err == nil {
		t.Error("a client silent for 2.5 s past an Idle of 1.5 s was not cut")
	}
}
