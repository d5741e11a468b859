package pgwire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// conn relays one client connection. Two goroutines: c2s reads the client's
// messages and writes the server; s2c reads the server's replies and writes
// the client. Every write to the server goes through send, which queues
// the reply it expects in the same order, so s2c always knows whose reply
// it is reading: the client's, or the proxy's own query.
type conn struct {
	p        *Proxy
	id       int
	client   net.Conn
	server   net.Conn // set once by dial, under serverMu
	serverMu sync.Mutex
	be       *pgproto3.Backend  // decodes what the client sends
	fr       *framer            // what be reads
	fe       *pgproto3.Frontend // decodes what the server sends

	sendMu  sync.Mutex
	pending chan *reply
	status  atomic.Uint32 // the server's last ReadyForQuery status: 'I', 'T' or 'E'
	// streaming: the server answered CopyBothResponse (a replication
	// stream), whose ReadyForQuery comes only once the stream ends.
	streaming atomic.Bool
	major     int // the server's major version, from its server_version

	// c2s only: prepared statements and portals by name → their SQL, and
	// the bytes they take; forgot: past Limits.MaxPrepared, they are no longer
	// kept.
	stmts   map[string]string
	portals map[string]string
	tracked int
	forgot  bool
	batch   []byte   // the client's extended-protocol messages since the last Sync
	execs   []string // the SQL each Execute of the batch runs
	unsync  bool     // a Flush sent part of the batch already: no injection

	// outMu serializes what goes to the client once fromServer runs:
	// fromServer holds it while it handles a message, fromClient to refuse
	// a message over the cap (refused: nothing more goes to the client).
	outMu   sync.Mutex
	refused bool

	closeOnce sync.Once
	done      chan struct{}
	acct      *listen.ConnAccount // the client's share of the proxy's account
	batchHeld int64               // what batch holds of it (c2s only)
	clock     *listen.Clock       // startup, then idle (Limits.Idle) deadlines
}

// reply is what the server will answer to one write ending in Sync or
// Query, up to its ReadyForQuery.
type reply struct {
	own    bool       // the proxy's own query: never reaches the client
	rows   [][]string // its rows (own only)
	failed bool       // it got an ErrorResponse (own only)
	ready  chan struct{}

	commit   *Armed // strike at this reply's COMMIT CommandComplete
	rollback bool   // the commit was failed on purpose: report it as an error

	stmt      *stmtHold // a statement trigger is armed: hold the reply
	held      [][]byte
	heldBytes int
	spilled   bool // over Limits.MaxHeldReply: passed on as it came, but for its ReadyForQuery
	status    byte
}

// stmtHold links a held client reply to the snapshots of written tables
// taken before and after it.
type stmtHold struct {
	before, after *reply
	// implicit: the batch ran in the proxy's own transaction in place of
	// its implicit one; fin is the proxy's COMMIT or ROLLBACK of it, and
	// strike the commit trigger that matched.
	implicit bool
	fin      *reply
	strike   *Armed
	released chan struct{} // closed once the reply went on (or never will)
}

func newConn(p *Proxy, id int, client net.Conn) *conn {
	c := &conn{p: p, id: id, client: client, done: make(chan struct{}), pending: make(chan *reply, 4096),
		stmts: map[string]string{}, portals: map[string]string{}, acct: p.acct.Conn(),
		// Startup is timed from accept; the server's bytes are signs of
		// life too (a NOTIFY to a client that LISTENs).
		clock: listen.NewClock(client, listen.Limits{Handshake: p.lim.Handshake, Idle: p.lim.Idle})}
	p.live.Store(id, c)
	return c
}

// Close closes both sides of the relay.
func (c *conn) Close() { c.close() }

func (c *conn) close() {
	c.closeOnce.Do(func() {
		defer c.acct.Close()
		c.p.live.Delete(c.id)
		close(c.done)
		c.client.Close()
		c.serverMu.Lock()
		if c.server != nil {
			c.server.Close()
		}
		c.serverMu.Unlock()
	})
}

// dial connects to the server unless the connection is closing.
func (c *conn) dial() error { return listen.Dial(c.p.upstream, c.done, &c.serverMu, &c.server) }

func (c *conn) serve() {
	defer c.close()
	c.fr = newFramer(c.clock.Reader(), c.p.lim.MaxMessage)
	c.fr.acct = c.acct
	c.be = pgproto3.NewBackend(c.fr, c.client)
	c.be.SetMaxBodyLen(c.p.lim.MaxMessage)
	startup, ok := c.greet() // within Limits.Handshake, as authenticate
	if !ok {
		return
	}
	if err := c.dial(); err != nil {
		c.refuse("08006", fmt.Sprintf("the proxy cannot reach the server: %v", err))
		return
	}
	c.fe = pgproto3.NewFrontend(c.clock.Touching(c.server), c.server)
	c.fe.SetMaxBodyLen(c.p.lim.MaxMessage)
	if !c.write(startup) || !c.authenticate() {
		return
	}
	c.clock.Shaken()
	go c.fromServer()
	c.fromClient()
}

// greet reads the client's startup message, answering "no" to TLS and GSS
// encryption: the proxy speaks plain TCP. A CancelRequest is passed to the
// server on a connection of its own.
func (c *conn) greet() ([]byte, bool) {
	askedTLS := false
	for {
		msg, err := c.be.ReceiveStartupMessage()
		if err != nil {
			if askedTLS && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
				c.p.failWaiting(&fault.Unclassifiable{Reason: "a client asked for TLS and hung up on the proxy's plain-TCP answer: connect with sslmode=disable"}, fault.Commit, fault.Statement)
			}
			return nil, false
		}
		switch msg := msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			askedTLS = true
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return nil, false
			}
		case *pgproto3.CancelRequest:
			c.p.cancel(msg)
			return nil, false
		case *pgproto3.StartupMessage:
			b, err := msg.Encode(nil)
			return b, err == nil
		default:
			return nil, false
		}
	}
}

// refuse answers a client the proxy cannot serve with a FATAL error
// (before fromServer runs, or under outMu).
func (c *conn) refuse(code, msg string) {
	c.be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: "outboxdrill pgwire proxy: " + msg})
	_ = c.be.Flush()
}

// refuseLarge answers a message over the cap, and reports whether err was
// one: the client gets a FATAL error, and the connection closes once it
// could read it.
func (c *conn) refuseLarge(err error) bool {
	var tl *tooLarge
	var body *pgproto3.ExceededMaxBodyLenErr
	switch {
	case errors.As(err, &tl):
	case errors.As(err, &body):
		tl = &tooLarge{from: "client", n: body.ActualBodyLen, cap: c.p.lim.MaxMessage}
	default:
		return false
	}
	c.outMu.Lock()
	if !c.refused {
		c.refused = true
		c.refuse(limitSQLState, tl.Error())
	}
	c.outMu.Unlock()
	listen.Linger(c.client, 2*time.Second)
	return true
}

// authenticate relays the authentication exchange up to the first
// ReadyForQuery, telling the client decoder which password message to
// expect.
func (c *conn) authenticate() bool {
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			return false
		}
		if !c.forward(msg) {
			return false
		}
		var auth uint32
		switch msg := msg.(type) {
		case *pgproto3.AuthenticationCleartextPassword:
			auth = pgproto3.AuthTypeCleartextPassword
		case *pgproto3.AuthenticationMD5Password:
			auth = pgproto3.AuthTypeMD5Password
		case *pgproto3.AuthenticationSASL:
			auth = pgproto3.AuthTypeSASL
		case *pgproto3.AuthenticationSASLContinue:
			auth = pgproto3.AuthTypeSASLContinue
		case *pgproto3.ErrorResponse:
			return false
		case *pgproto3.ParameterStatus:
			if msg.Name == "server_version" {
				fmt.Sscanf(msg.Value, "%d", &c.major)
			}
			continue
		case *pgproto3.ReadyForQuery:
			c.status.Store(uint32(msg.TxStatus))
			return true
		default:
			continue
		}
		if c.be.SetAuthType(auth) != nil {
			return false
		}
		answer, err := c.be.Receive()
		if err != nil {
			c.refuseLarge(err)
			return false
		}
		b, err := answer.Encode(nil)
		if err != nil || !c.write(b) {
			return false
		}
	}
}

// forward writes one server message to the client at once.
func (c *conn) forward(msg pgproto3.BackendMessage) bool {
	c.be.Send(msg)
	return c.be.Flush() == nil
}

// write sends bytes to the server (startup and authentication only: later
// writes go through send).
func (c *conn) write(b []byte) bool {
	_, err := c.server.Write(b)
	return err == nil
}

// send writes b to the server and queues the reply it will get, under one
// lock so that the queue's order is the server's.
func (c *conn) send(r *reply, b []byte) bool {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if r != nil {
		select {
		case c.pending <- r:
		case <-c.done:
			return false
		}
		c.clock.Owe() // until its ReadyForQuery, the client may wait silent
	}
	_, err := c.server.Write(b)
	return err == nil
}

// ask runs the proxy's own query on the connection and waits for its rows
// (the caller must be at a point where the server is between batches).
func (c *conn) ask(sql string) (*reply, bool) {
	r := c.own(sql)
	if r == nil {
		return nil, false
	}
	select {
	case <-r.ready:
		return r, true
	case <-c.done:
		return nil, false
	}
}

// own sends the proxy's own query without waiting.
func (c *conn) own(sql string) *reply {
	r := &reply{own: true, ready: make(chan struct{})}
	b, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	if !c.send(r, b) {
		return nil
	}
	return r
}
