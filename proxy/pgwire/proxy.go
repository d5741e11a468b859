// Package pgwire is a PostgreSQL wire-protocol proxy that strikes a fault at
// an exact protocol boundary of a service's connections: the reply to the
// COMMIT of a transaction that wrote a given table, or the reply to a
// statement that wrote it. The service needs no code change: it connects to
// the proxy's address instead of the server's.
//
// What a transaction wrote is read from the server itself, not guessed from
// SQL text: right before the client's COMMIT is forwarded, the proxy asks
// pg_stat_xact_user_tables on the same connection, inside the same
// transaction, and swallows the answer. It does so only while a trigger is
// armed, so an unarmed proxy adds one hop and nothing else.
//
// A fault is never approximated: where a boundary cannot be attributed
// exactly (TLS, a COMMIT inside a multi-statement simple query, a batch
// without Sync), the armed trigger fails with *Unclassifiable and nothing
// is injected.
package pgwire

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// Proxy listens on a loopback port and relays each client connection to
// the upstream server.
type Proxy struct {
	upstream string
	ln       *listen.Listener
	live     sync.Map    // id → *conn, while open: OpenTransactions reads their status
	shared   atomic.Bool // ShareSlots: the cap is shared
	lim      Limits
	acct     *listen.Account // what all its clients make it hold
	errs     errorTally      // the server's errors to the clients, for a witness

	fault.Registry[*Armed, Event]
}

// Event is one boundary the proxy saw: a commit with the tables its
// transaction wrote (nil when nobody asked: no commit trigger was armed),
// or a statement batch that wrote tables while a statement trigger was
// armed.
type Event struct {
	Conn     int // the proxy's number for the client connection, from 1
	Boundary fault.Boundary
	Tables   []string
	// Command is a statement's command as its reply's tag names it
	// (INSERT, UPDATE, DELETE, …; the last of a batch), never its SQL
	// text, which may carry values; "" on a commit.
	Command string
	Fault   string // the trigger that struck here, "" for none
	At      time.Time
}

// Listen starts a proxy to upstream ("host:port") on 127.0.0.1, on a port
// of the kernel's choosing, with DefaultLimits.
func Listen(upstream string) (*Proxy, error) { return ListenWith(upstream, DefaultLimits()) }

// ListenWith starts a proxy with limits of its own (a cap left at 0 is
// its default).
func ListenWith(upstream string, lim Limits) (*Proxy, error) {
	lim = lim.orDefaults()
	p := &Proxy{upstream: upstream, lim: lim, acct: lim.Account()}
	p.Bound(lim.RecordBytes)
	ln, err := listen.Serve(listen.Protocol{
		Open:   func(id int, nc net.Conn) listen.Conn { return newConn(p, id, nc) },
		Serve:  func(c listen.Conn) { c.(*conn).serve() },
		Refuse: p.refuse,
	})
	if err != nil {
		return nil, fmt.Errorf("pgwire proxy: %w", err)
	}
	p.ln = ln
	return p, nil
}

// refuse answers a client over the proxy's connection cap as PostgreSQL
// answers one over its max_connections: it reads the startup message
// (answering "no" to TLS), then sends a FATAL ErrorResponse with SQLSTATE
// 53300 (too_many_connections). A CancelRequest still goes through, as
// PostgreSQL serves one whatever its count of connections.
func (p *Proxy) refuse(nc net.Conn, max int) {
	be := pgproto3.NewBackend(nc, nc) // startup messages: at most 10000 bytes
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch msg := msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := nc.Write([]byte{'N'}); err != nil {
				return
			}
		case *pgproto3.CancelRequest:
			p.cancel(msg)
			return
		default:
			be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "53300",
				Message: fmt.Sprintf("outboxdrill proxy: too many client connections (cap %d%s)", max, p.sharedCap())})
			_ = be.Flush()
			return
		}
	}
}

// cancel passes a CancelRequest to the server on a connection of its own.
func (p *Proxy) cancel(msg *pgproto3.CancelRequest) {
	b, err := msg.Encode(nil)
	if err != nil {
		return
	}
	if s, err := net.DialTimeout("tcp", p.upstream, 5*time.Second); err == nil {
		_, _ = s.Write(b)
		s.Close()
	}
}

// Connections is how many client connections the proxy has taken so far:
// whether the service uses this link at all.
func (p *Proxy) Connections() int { return p.ln.Accepted() }

// OpenTransactions is how many of its client connections are inside a
// transaction block now (the server's last ReadyForQuery said T, or E: a
// failed one not yet rolled back): a service mid-transaction is still
// working, whatever the tables show so far.
func (p *Proxy) OpenTransactions() int {
	n := 0
	p.live.Range(func(_, v any) bool {
		if s := v.(*conn).status.Load(); s == 'T' || s == 'E' {
			n++
		}
		return true
	})
	return n
}

// Awaiting is the longest its clients' connections have waited for the
// server's answer without a break (a statement sent, its ReadyForQuery
// not back): a client blocked on a lock waits here, inside a transaction
// or not. A replication stream (CopyBoth: START_REPLICATION) never gets
// its ReadyForQuery while it streams, and is not counted.
func (p *Proxy) Awaiting() time.Duration {
	var most time.Duration
	p.live.Range(func(_, v any) bool {
		if c := v.(*conn); !c.streaming.Load() {
			most = max(most, c.clock.OwedFor())
		}
		return true
	})
	return most
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr() }

// Arm adds a trigger of a database link; it applies to every connection
// through this proxy, counting matches across them in the order the proxy
// sees them.
func (p *Proxy) Arm(t fault.Trigger) (*Armed, error) {
	if !t.Link.Database() {
		return nil, fmt.Errorf("pgwire: %s is not a database link's trigger", t.On())
	}
	if t.Action.Do.Neutral() { // the broker's faults: steps refuses them before
		return nil, fmt.Errorf("pgwire: do: %v applies on a broker boundary, not on %s", t.Action.Do, t.Link)
	}
	fa, err := fault.NewArmed(t.Action, t.Nth)
	if err != nil {
		return nil, fmt.Errorf("pgwire: %w", err)
	}
	a := &Armed{Armed: fa, Trigger: t}
	p.Add(a)
	return a, nil
}

// waiting returns the armed triggers of a boundary that may still strike.
func (p *Proxy) waiting(b fault.Boundary) []*Armed {
	var out []*Armed
	for _, a := range p.Waiting() {
		if a.Trigger.Boundary == b {
			out = append(out, a)
		}
	}
	return out
}

// failWaiting fails every trigger of the boundaries that may still strike.
func (p *Proxy) failWaiting(err error, bs ...fault.Boundary) {
	for _, b := range bs {
		for _, a := range p.waiting(b) {
			a.Fail(err)
		}
	}
}

func (p *Proxy) record(e Event) {
	e.At = time.Now()
	p.Record(e)
}

// ShareSlots makes the proxy's connections count against s too, a cap
// shared with the other proxies to the same server (listen.Slots).
func (p *Proxy) ShareSlots(s *listen.Slots) { p.shared.Store(true); p.ln.ShareSlots(s) }

// Close stops listening, closes every relayed connection and waits for
// them; triggers that never struck are left as they are (Done stays open).
func (p *Proxy) Close() error { return p.ln.Close() }

// RecordSize is what the event keeps beyond its struct (fault.Sized).
func (e Event) RecordSize() (int, bool) {
	n := len(e.Command)
	for _, t := range e.Tables {
		n += 16 + len(t)
	}
	return n, e.Fault != ""
}

// sharedCap says what a shared cap is, for the refusal.
func (p *Proxy) sharedCap() string {
	if p.shared.Load() {
		return ": what the PostgreSQL server has left for the run's services, shared by all their proxies"
	}
	return ""
}
