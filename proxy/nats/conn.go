package nats

import (
	"bufio"
	"container/list"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// lingerTimeout bounds how long a client refused with a protocol error
// has to read it before the connection closes.
const lingerTimeout = 2 * time.Second

// pubAckError is the PubAck an injected publish error answers: JetStream's
// own store failure (JSStreamStoreFailedF: 503, err_code 10077), which
// clients treat as retryable.
var pubAckError = []byte(`{"error":{"code":503,"err_code":10077,"description":"outboxdrill: the drill failed this publish; it was not sent to the server"}}`)

// conn relays one client connection: fromClient forwards the client's
// operations, fromServer the server's, pairing each reply the proxy awaits
// with the publish it answers.
type conn struct {
	*listen.Pair
	p        *Proxy
	id       int
	server   net.Conn
	toServer *bufio.Writer // fromClient only

	mu      sync.Mutex
	pending map[string][]*call // the replies awaited, by reply subject
	npend   int
	aged    list.List           // the calls of pending, oldest first (PendingAge)
	subs    map[string]string   // the client's subscriptions: sid → subject
	acct    *listen.ConnAccount // what pending, subs and apiReplies hold
	clock   *listen.Clock       // the handshake's deadline, then idle: nothing either way
	shaken  atomic.Bool         // CONNECT came: the handshake's clock stopped
	// apiReplies are the reply subjects of the client's consumer API
	// requests awaiting their answer (consumerAPI).
	apiReplies map[string]bool
	headers    bool // the client's CONNECT takes HMSG

	opaque atomic.Bool // the connection turned to TLS
	// ending: the client sent what the server refuses; fromServer passes
	// on the server's answers to what came before, then leaves the
	// client's side open for the refusal (serverDone).
	ending     atomic.Bool
	serverDone chan struct{}
	// serverMax is the server's max_payload, from its INFO.
	serverMax atomic.Int64
}

// call is a client operation whose reply the proxy awaits.
type call struct {
	seq      int64  // its event's
	reply    string // the subject its reply comes on
	x        crossing
	strike   *Armed // a reply trigger: hold the reply
	copy     bool   // a duplicated publish's copy: its reply is the proxy's, never the client's
	answered chan struct{}
	at       time.Time     // when it was sent
	cost     int64         // what it took of the connection's account
	el       *list.Element // its place in conn.aged
}

func newConn(p *Proxy, id int, client net.Conn) *conn {
	return &conn{Pair: listen.NewPair(client), p: p, id: id, acct: p.acct.Conn(),
		pending: map[string][]*call{}, subs: map[string]string{}, apiReplies: map[string]bool{}, serverDone: make(chan struct{})}
}

func (c *conn) serve() {
	// The handshake's clock, as the pgwire proxy's: the client's reads
	// fail once it passed, until its CONNECT. The idle clock runs from
	// CONNECT (relay sets it).
	c.clock = listen.NewClock(c.Client, listen.Limits{Handshake: c.p.lim.Handshake})
	defer c.acct.Close()
	defer c.Close()
	server, err := c.Dial(c.p.upstream)
	if err != nil {
		c.Write([]byte("-ERR '"+oneLine("outboxdrill nats proxy: cannot reach the server: "+err.Error())+"'\r\n"), true)
		return
	}
	c.server, c.toServer = server, bufio.NewWriterSize(server, bufSize)
	go c.fromServer()
	c.fromClient()
}

// send forwards bytes to the server, flushing unless more are already
// read ahead (fromClient only).
func (c *conn) send(b []byte, more bool) bool {
	if _, err := c.toServer.Write(b); err != nil {
		return false
	}
	return more || c.toServer.Flush() == nil
}

func (c *conn) fromClient() {
	defer c.Close()
	rd := newReader(c.clock.Reader(), false)
	rd.serverMax = &c.serverMax
	for {
		if !rd.buffered() && c.toServer.Flush() != nil { // before waiting for more, what was sent goes out
			return
		}
		if rd.tls() {
			c.toServer.Flush()
			c.blind(c.server, rd)
			return
		}
		m, err := rd.next()
		if err == io.EOF {
			c.HalfClose(c.toServer.Flush) // the client is done: its answers still come
			return
		}
		if err != nil {
			var pe *protoError
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !c.shaken.Load() {
				pe = errAuthTimeout // nats-server's words for it
			}
			if pe != nil || errors.As(err, &pe) {
				c.refuse(pe)
			}
			return
		}
		if !c.relay(&m, rd.buffered()) {
			return
		}
	}
}

// refuse ends a connection whose client sent what the server refuses, as
// the server ends it: the answers to what came before (a PONG), then its
// -ERR. The server's side is half-closed, so the server answers what it
// has and closes; fromServer passes that on, then the -ERR follows.
func (c *conn) refuse(pe *protoError) {
	c.ending.Store(true)
	if c.toServer.Flush() != nil {
		return
	}
	if tc, ok := c.server.(*net.TCPConn); ok && tc.CloseWrite() == nil {
		t := time.NewTimer(lingerTimeout)
		defer t.Stop()
		select {
		case <-c.serverDone:
		case <-t.C:
		}
	}
	if c.Write(pe.line(), true) {
		listen.Linger(c.Client, lingerTimeout)
	}
}

// blind relays the rest of one direction byte for byte: a TLS session the
// proxy cannot read. Every waiting trigger fails: what this connection
// carries can no longer be attributed.
func (c *conn) blind(dst io.Writer, rd *reader) {
	if c.opaque.CompareAndSwap(false, true) {
		c.p.failAll(&fault.Unclassifiable{Reason: "a connection turned to TLS: the proxy can only relay it blindly"})
	}
	_, _ = io.Copy(dst, rd.r)
}

// relay forwards one client operation, applying the triggers to a PUB.
func (c *conn) relay(m *msg, more bool) bool {
	switch m.op {
	case "PUB", "HPUB":
		return c.publish(m, more)
	case "CONNECT":
		c.mu.Lock()
		c.headers = connectHeaders(m.json)
		c.mu.Unlock()
		if !c.shaken.Swap(true) { // the handshake is over: the idle clock runs
			c.clock.SetIdle(c.p.lim.Idle)
			c.clock.Shaken()
		}
		c.p.record(Event{Conn: c.id, Op: m.op}, nil) // never its fields
	case "SUB":
		c.subscribe(m.sid, m.subject)
		c.p.record(Event{Conn: c.id}, m)
	case "UNSUB":
		c.mu.Lock()
		c.unsubscribe(m.sid)
		c.mu.Unlock()
		c.p.record(Event{Conn: c.id}, m)
	default:
		c.p.record(Event{Conn: c.id, Op: m.op}, nil)
	}
	return c.send(m.raw, more)
}

// publish applies what the triggers say about a PUB or HPUB and forwards
// it.
func (c *conn) publish(m *msg, more bool) bool {
	x := classify(m)
	ev := Event{Conn: c.id, Kind: x.kind}
	a := c.p.strikeOn(x)
	if a != nil && a.Do == fault.Duplicate {
		return c.publishTwice(a, m, x, ev)
	}
	if a != nil && (a.Trigger.Boundary == Request || a.Do == fault.Error) {
		ev.Fault = a.Trigger.String()
		if a.Do != fault.Delay {
			return c.strikeRequest(a, m, x, ev)
		}
		if c.toServer.Flush() != nil || !a.Hold(c.Done, c.Close, func() bool { return true }) {
			return false
		}
		a = nil // the delay has passed: the operation goes on
	}
	seq := c.p.record(ev, m)
	c.awaitConsumerReply(m)
	// Before it is sent: the server's answer to it must find it noted.
	switch x.kind {
	case KindPull:
		c.p.idle.pulled(m.reply)
	case KindAck:
		c.p.idle.acked(m.subject, x.ack)
	}
	k := c.expect(m, x, a, seq)
	held := k != nil && k.strike != nil
	if !c.send(m.raw, more && !held) {
		return false
	}
	return !held || c.barrier(k)
}

// strikeRequest applies a kill, cut or error before the operation reaches
// the server: it never does.
func (c *conn) strikeRequest(a *Armed, m *msg, x crossing, ev Event) bool {
	ev.Dropped = true
	c.p.record(ev, m)
	// What the client sent before goes on first.
	if c.toServer.Flush() != nil {
		return false
	}
	if a.Do == fault.Error {
		a.Finish(nil)
		return c.answerFailure(m, x)
	}
	return a.Hold(c.Done, c.Close, func() bool { return true })
}

// answerFailure gives the client the failure of an operation the proxy
// did not forward, on its reply subject, as the server would answer it.
func (c *conn) answerFailure(m *msg, x crossing) bool {
	if m.reply == "" {
		return true // nothing answers it: the operation is lost
	}
	sid, headers := c.sidFor(m.reply)
	var b []byte
	switch {
	case sid == "":
		return true // the client does not listen on its reply subject
	case x.kind == KindPublish:
		b = plainMsg(m.reply, sid, pubAckError)
	case !headers:
		return true // a status needs HMSG, which the client did not ask for
	case x.kind == KindPull:
		b = statusMsg(m.reply, sid, "409 outboxdrill: the drill failed this pull request; it was not sent to the server")
	default:
		b = statusMsg(m.reply, sid, "503")
	}
	return c.Write(b, true)
}

// sidFor finds the client's subscription that a reply subject reaches.
func (c *conn) sidFor(subject string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sid, pattern := range c.subs {
		if matchSubject(pattern, subject) {
			return sid, c.headers
		}
	}
	return "", c.headers
}

// expect registers the reply the proxy awaits for a PUB: a publish's
// PubAck (for the history), and any reply a trigger holds.
func (c *conn) expect(m *msg, x crossing, a *Armed, seq int64) *call {
	if m.reply == "" {
		if a != nil {
			a.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("the %s to %s carried no reply subject: the server answers nothing to hold", x.kind, m.subject)})
		}
		return nil
	}
	if a == nil && x.kind != KindPublish {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Clones: a record must not keep its control line (up to
	// MaxControlLine) alive.
	x.subject = strings.Clone(x.subject)
	k := &call{seq: seq, reply: strings.Clone(m.reply), x: x, strike: a, answered: make(chan struct{}), at: time.Now()}
	k.cost = entryCost + int64(len(k.reply)+len(x.subject))
	c.age(k.at)
	var err error
	if c.npend >= c.p.lim.MaxPending {
		err = fmt.Errorf("over %d replies awaited on one connection", c.p.lim.MaxPending)
	} else if err = c.acct.Take(k.cost); err != nil {
		err = fmt.Errorf("the records of the replies awaited: %w", err)
	}
	if err != nil {
		c.p.unpaired.Add(1)
		if a != nil {
			a.Finish(&fault.Unclassifiable{Reason: err.Error()})
		}
		return nil
	}
	c.pending[k.reply] = append(c.pending[k.reply], k)
	c.npend++
	k.el = c.aged.PushBack(k)
	return k
}

// take removes the first call awaiting a reply on subject (nil: none).
func (c *conn) take(subject string) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.pending[subject]
	if len(q) == 0 {
		return nil
	}
	if len(q) == 1 {
		delete(c.pending, subject)
	} else {
		c.pending[subject] = q[1:]
	}
	c.npend--
	c.settled(q[0])
	return q[0]
}

// forget removes a call that got no reply; false if its reply is being
// handled.
func (c *conn) forget(subject string, k *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.pending[subject]
	for i, x := range q {
		if x == k {
			c.pending[subject] = append(q[:i:i], q[i+1:]...)
			if len(c.pending[subject]) == 0 {
				delete(c.pending, subject)
			}
			c.npend--
			c.settled(k)
			return true
		}
	}
	return false
}

// barrier waits until the held reply's fault has struck: nothing the
// client sent after the operation reaches the server first.
func (c *conn) barrier(k *call) bool {
	return c.Await(k.answered, c.p.lim.ReplyWait, func() bool {
		if !c.forget(k.reply, k) {
			return false
		}
		k.strike.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("no reply to the %s to %s came on its connection within %v", k.x.kind, k.x.subject, c.p.lim.ReplyWait)})
		return true
	})
}

func (c *conn) fromServer() {
	defer func() {
		close(c.serverDone)
		if !c.ending.Load() {
			c.Close()
		}
	}()
	rd := newReader(c.clock.Touching(c.server), true)
	for {
		if !rd.buffered() && !c.Write(nil, true) { // before waiting for more, what was sent goes out
			return
		}
		if rd.tls() {
			c.blind(c.Writer(), rd)
			return
		}
		m, err := rd.next()
		if err != nil {
			var pe *protoError
			if errors.As(err, &pe) {
				c.Write([]byte("-ERR '"+oneLine("outboxdrill nats proxy: the server sent what the proxy cannot read: "+pe.text)+"'\r\n"), true)
			}
			return
		}
		if !c.fromServerOp(&m, rd.buffered()) {
			return
		}
	}
}

// fromServerOp passes one server operation on.
func (c *conn) fromServerOp(m *msg, more bool) bool {
	switch m.op {
	case "MSG", "HMSG":
		return c.message(m, more)
	case "INFO":
		c.p.record(Event{Conn: c.id, Op: m.op}, nil)
		js, in, err := rewriteInfo(m.json, c.p.Addr())
		if in.maxPayload > 0 { // an INFO that does not say keeps the last one's
			c.serverMax.Store(in.maxPayload)
		}
		if err != nil {
			// Not JSON: no client can read it either; it goes on as it
			// is, and the client says what is wrong.
			return c.Write(m.raw, true)
		}
		return c.Write(append(append([]byte("INFO "), js...), "\r\n"...), true)
	}
	c.p.record(Event{Conn: c.id, Op: m.op}, nil)
	return c.Write(m.raw, !more)
}

// message passes a MSG or HMSG on, or holds it for a fault: a reply the
// proxy awaits, or a delivery.
func (c *conn) message(m *msg, more bool) bool {
	x := crossing{subject: m.subject, fromServer: true}
	ev := Event{Conn: c.id}
	var a *Armed
	c.consumerReply(m)
	k := c.take(m.subject)
	switch {
	case k != nil:
		defer close(k.answered)
		x.kind, ev.Answers, a = KindReply, k.seq, k.strike
		if k.copy { // whatever the server answered the copy, it is the proxy's
			ev.Kind, ev.Fault = KindReply, a.Trigger.String()
			return c.copyAnswered(k, ev, m)
		}
		if a != nil && k.x.kind == KindPublish && a.Trigger.Op == OpPublish && !isPubAck(m.data()) {
			a.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("the reply to the publish to %s is no JetStream PubAck: no stream took it", k.x.subject)})
			a = nil
		}
	case strings.HasPrefix(m.reply, "$JS.ACK."):
		x.kind = KindDelivery
	}
	ev.Kind = x.kind
	if k == nil || k.strike == nil {
		a = c.p.strikeOn(x)
	}
	// Before the client can see it, and so answer it.
	switch {
	case x.kind == KindDelivery || k != nil && strings.HasPrefix(m.reply, "$JS.ACK."):
		// Error, drop, cut and kill keep it from the client; duplicate
		// hands it twice.
		copies := 0
		switch {
		case a == nil || a.Do == fault.Delay:
			copies = 1
		case a.Do == fault.Duplicate:
			copies = 2
		}
		c.p.idle.delivered(m.reply, copies)
	case m.op == "HMSG" && k == nil:
		c.p.idle.status(m.subject, m)
	}
	if a == nil {
		c.p.record(ev, m)
		return c.Write(m.raw, !more)
	}
	ev.Fault = a.Trigger.String()
	if a.Do == fault.Duplicate {
		return c.deliverTwice(a, x, ev, m)
	}
	if a.Do == fault.Error || a.Do == fault.Drop {
		// The server's message never reaches the client.
		ev.Dropped = true
		c.p.record(ev, m)
		a.Finish(nil)
		return true
	}
	c.p.record(ev, m)
	// What came before reaches the client first.
	if !c.Write(nil, true) {
		return false
	}
	return a.Hold(c.Done, c.Close, func() bool { return c.Write(m.raw, true) })
}
