package resp

import (
	"bufio"
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

// conn relays one client connection: fromClient forwards commands and
// queues a call for each, fromServer pairs each reply with its call.
type conn struct {
	p      *Proxy
	id     int
	client net.Conn

	serverMu sync.Mutex
	server   net.Conn

	pending chan *call
	out     *bufio.Writer // to the client, under outMu
	outMu   sync.Mutex

	// fromClient only
	last   *call       // the last call sent: the barrier waits for its reply
	multi  bool        // inside MULTI: replies are QUEUED, the results come with EXEC
	pubsub atomic.Bool // RESP2 subscribe mode: the server talks unasked (set by fromServer)
	// silenced: a drop struck. Nothing more reaches the client, and
	// nothing more it sends reaches Redis: on an ordered stream a lost
	// reply stalls what follows, and a later reply passed on would pair
	// with the wrong command.
	silenced atomic.Bool

	closeOnce sync.Once
	done      chan struct{}
	acct      *listen.ConnAccount // the client's share of the proxy's account
	clock     *listen.Clock       // Limits.Handshake and Idle (none by default)
}

// call is one command sent to Redis, waiting for its reply.
type call struct {
	cmd      []string
	strike   *Armed // a reply trigger: hold the reply
	copy     bool   // the second send of a duplicated publish: its reply is the proxy's, never the client's
	answered chan struct{}
	tab      *listen.Tab // what the command holds of the account, until its reply
	sent     time.Time   // when it went on to Redis
}

// replied gives back what a call's command held once its reply reached
// the client: nothing more is owed for it.
func (c *conn) replied(k *call) {
	k.tab.Done()
	c.clock.Paid()
}

func newConn(p *Proxy, id int, client net.Conn) *conn {
	return &conn{p: p, id: id, client: client, pending: make(chan *call, 4096),
		out: bufio.NewWriterSize(client, 64<<10), done: make(chan struct{}), acct: p.acct.Conn(),
		clock: listen.NewClock(client, listen.Limits{Handshake: p.lim.Handshake, Idle: p.lim.Idle})}
}

// Close closes both sides.
func (c *conn) Close() {
	c.closeOnce.Do(func() {
		defer c.acct.Close()
		close(c.done)
		c.client.Close()
		c.serverMu.Lock()
		if c.server != nil {
			c.server.Close()
		}
		c.serverMu.Unlock()
	})
}

func (c *conn) serve() {
	defer c.Close()
	if err := listen.Dial(c.p.upstream, c.done, &c.serverMu, &c.server); err != nil {
		c.write(fmt.Appendf(nil, "-ERR outboxdrill resp proxy: cannot reach Redis: %v\r\n", err), true)
		return
	}
	go c.fromServer()
	c.fromClient()
}

// write sends bytes to the client, flushing when asked.
func (c *conn) write(b []byte, flush bool) bool {
	if c.silenced.Load() {
		return true // a drop struck: the client hears nothing more
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if _, err := c.out.Write(b); err != nil {
		return false
	}
	return !flush || c.out.Flush() == nil
}

func (c *conn) fromClient() {
	defer c.Close()
	rd := newReader(c.clock.Reader())
	rd.acct = c.acct
	for shaken := false; ; {
		cmd, raw, err := rd.command()
		if err == nil && !shaken { // RESP has no handshake: a first command ends it
			c.clock.Shaken()
			shaken = true
		}
		if err == io.EOF { // the client is done: the replies to what it sent still come
			c.serverMu.Lock()
			s := c.server
			c.serverMu.Unlock()
			listen.ShutWrite(s, c.done)
			return
		}
		if err != nil {
			// A command Redis (or the proxy's limits) refuses: the client
			// gets the error after the replies to what it sent before,
			// then the connection closes, as Redis closes it.
			if pe, ok := isProto(err); ok && c.barrier() && c.write(pe.reply(), true) {
				listen.Linger(c.client, lingerTimeout)
			}
			return
		}
		if len(cmd) == 0 {
			rd.tab.Done()
			continue // an empty inline line: Redis ignores it too
		}
		if !c.relay(cmd, raw, rd.tab) {
			return
		}
		if c.silenced.Load() {
			// After a drop the connection stays open and silent until
			// the client gives up on it, as over a lost packet.
			_, _ = io.Copy(io.Discard, rd.r)
			return
		}
	}
}

// relay applies what the triggers say about one command and forwards it;
// tab is what the command holds: its call keeps it until the reply, else
// it is given back here.
func (c *conn) relay(cmd []string, raw []byte, tab *listen.Tab) bool {
	queued := false
	defer func() {
		if !queued {
			tab.Done()
		}
	}()
	name := strings.ToUpper(cmd[0])
	if c.multi && name != "EXEC" && name != "DISCARD" {
		c.p.failOn(cmd, &fault.Unclassifiable{Reason: fmt.Sprintf("%s inside MULTI: its reply is QUEUED and its result comes with EXEC's", name)})
	}
	if c.pubsub.Load() {
		c.p.failOn(cmd, &fault.Unclassifiable{Reason: name + " on a connection in RESP2 subscribe mode"})
		return c.send(nil, raw)
	}
	a := c.p.strikeOn(cmd)
	if a != nil && a.Do == fault.Duplicate && name == "XADD" {
		queued = true // the first send's call has the tab
		return c.sendTwice(a, cmd, raw, tab)
	}
	if a != nil && (a.Trigger.Boundary == fault.Request || a.Do == fault.Error) {
		if !c.barrier() {
			return false
		}
		ev := Event{Conn: c.id, Command: cmd, Fault: a.Trigger.String()}
		if a.Do == fault.Error {
			ev.Reply = Value{Type: '-', Str: "ERR outboxdrill: the drill failed this " + name + "; it was not sent to Redis"}
			c.p.record(ev)
			a.Finish(nil)
			return c.write([]byte("-"+ev.Reply.Str+"\r\n"), true)
		}
		c.p.record(ev)
		if !a.Hold(c.done, c.Close, func() bool { return true }) {
			return false
		}
		a = nil // a delay has passed: the command goes on
	}
	k := &call{cmd: cmd, answered: make(chan struct{}), tab: tab, sent: time.Now()}
	if a != nil {
		k.strike = a
	}
	queued = true // the call has the tab: the connection's close gives it back if no reply comes
	if !c.send(k, raw) {
		return false
	}
	switch name {
	case "MULTI":
		c.multi = true
	case "EXEC", "DISCARD":
		c.multi = false
	}
	if k.strike != nil {
		// The barrier: nothing pipelined after a held reply reaches
		// Redis before the fault has struck.
		select {
		case <-k.answered:
		case <-c.done:
			return false
		}
	}
	return true
}

// sendTwice sends an XADD a duplicate struck twice, back to back, as a
// relay retrying at the wire would: the client gets the reply to its own,
// the copy's reply (a second entry id, or Redis's error for an explicit
// id) is recorded and never reaches it. The copy holds what it weighs on
// the account until its reply, as any command does; the barrier waits for
// it, so nothing pipelined after comes between.
func (c *conn) sendTwice(a *Armed, cmd []string, raw []byte, tab *listen.Tab) bool {
	if !c.send(&call{cmd: cmd, answered: make(chan struct{}), tab: tab}, raw) {
		return false
	}
	ctab := c.acct.Tab()
	if err := ctab.Take(int64(len(raw))); err != nil {
		ctab.Done()
		a.Finish(fmt.Errorf("the copy was not sent: %w", err))
		return true
	}
	cp := &call{cmd: cmd, strike: a, copy: true, answered: make(chan struct{}), tab: ctab}
	if !c.send(cp, raw) {
		return false
	}
	select {
	case <-cp.answered:
		return true
	case <-c.done:
		return false
	}
}

// barrier waits until every reply to what was sent before has reached the
// client.
func (c *conn) barrier() bool {
	if c.last == nil {
		return true
	}
	select {
	case <-c.last.answered:
		return true
	case <-c.done:
		return false
	}
}

// send queues the call (nil: the server will not answer with a paired
// reply) and forwards the raw command.
func (c *conn) send(k *call, raw []byte) bool {
	if k != nil {
		select {
		case c.pending <- k:
		case <-c.done:
			return false
		}
		c.last = k
		c.clock.Owe() // the client may wait silent for its reply (XREADGROUP BLOCK 0)
	}
	_, err := c.server.Write(raw)
	return err == nil
}

func (c *conn) fromServer() {
	defer c.Close()
	// A reply over MaxReplyBuffer streams: once the reader says so, it
	// goes on to the client as it comes, and cannot be held.
	var streamed *call // the call it answers (nil: a push, or pub/sub)
	streaming := false
	var rd *reader
	rd = newReplyReader(c.clock.Touching(c.server), func(b []byte) error {
		if !streaming {
			streaming = true
			if rd.typ != '>' && !c.pubsub.Load() {
				select {
				case streamed = <-c.pending:
				case <-c.done:
					return net.ErrClosed
				}
				if a := streamed.strike; a != nil { // (fromClient reads strike: left as it is)
					a.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("the reply to %s is over the proxy's %d MB reply buffer: it streamed on to the client and could not be held", strings.ToUpper(streamed.cmd[0]), MaxReplyBuffer>>20)})
				}
			}
		}
		if !c.write(b, false) {
			return net.ErrClosed
		}
		return nil
	})
	for {
		streaming, streamed = false, nil
		v, raw, err := rd.next()
		if err != nil {
			_, proto := isProto(err)
			if !streaming && (proto || errors.Is(err, errTooDeep) || errors.Is(err, errMalformed)) {
				// Nothing of this reply reached the client yet: say why
				// the connection ends.
				c.write([]byte("-ERR outboxdrill resp proxy: "+strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error())+"\r\n"), true)
			}
			return
		}
		if streaming {
			if !c.write(nil, !rd.buffered()) {
				return
			}
			if streamed != nil {
				c.p.record(Event{Conn: c.id, Command: streamed.cmd, Reply: v})
				c.replied(streamed)
				close(streamed.answered)
			}
			continue
		}
		if v.Type == '>' || c.pubsubReply(v) {
			if !c.write(raw, !rd.buffered()) {
				return
			}
			continue
		}
		var k *call
		select {
		case k = <-c.pending:
		case <-c.done:
			return
		}
		if !c.answer(k, v, raw, rd.buffered()) {
			return
		}
	}
}

// pubsubReply reports whether the connection talks RESP2 pub/sub: after a
// SUBSCRIBE's confirmation, messages come unasked and pair with no call.
func (c *conn) pubsubReply(v Value) bool {
	if c.pubsub.Load() {
		return true
	}
	if v.Type == '*' && len(v.Elems) == 3 {
		switch strings.ToLower(v.Elems[0].Str) {
		case "subscribe", "psubscribe", "ssubscribe":
			c.pubsub.Store(true)
		}
	}
	return false
}

// answer passes one reply to the client, or holds it for the call's fault.
func (c *conn) answer(k *call, v Value, raw []byte, more bool) bool {
	ev := Event{Conn: c.id, Command: k.cmd, Reply: v}
	c.p.noteIdle(k, v)
	defer close(k.answered)
	defer c.replied(k)
	if k.strike == nil {
		c.p.record(ev)
		return c.write(raw, !more)
	}
	ev.Fault = k.strike.Trigger.String()
	switch {
	case k.copy: // Redis's answer to the copy: the client sent one XADD
		ev.Copy = true
		c.p.record(ev)
		k.strike.Finish(nil)
		return c.write(nil, true) // what came before may wait for a flush this reply would have made
	case k.strike.Do == fault.Duplicate:
		return c.answerTwice(k, v, raw, ev)
	case k.strike.Do == fault.Drop:
		c.p.record(ev)
		ok := c.write(nil, true) // the replies before it do reach the client
		c.silenced.Store(true)
		k.strike.Finish(nil)
		return ok
	}
	c.p.record(ev)
	return k.strike.Hold(c.done, c.Close, func() bool { return c.write(raw, true) })
}
