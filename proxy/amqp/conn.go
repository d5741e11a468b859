package amqp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// lingerTimeout bounds how long a refused client has to read why.
const lingerTimeout = 2 * time.Second

// conn relays one client connection: fromClient forwards the client's
// frames, fromServer the server's, each a whole message at a time.
type conn struct {
	*listen.Pair
	p      *Proxy
	id     int
	server net.Conn

	srvMu    sync.Mutex // both directions may write to the server (a close the proxy sends)
	toServer *bufio.Writer

	mu         sync.Mutex
	chans      map[uint16]*channel
	assembling [2]int       // body bytes announced by the messages being assembled, per direction
	frameMax   atomic.Int64 // the payload cap both readers apply
	// channelMax is the number of channels the client may have open at
	// once, as connection.tune and tune-ok negotiated it (the server's
	// offer until the client answers; 65535 for no limit).
	channelMax int
	serverMax  int           // the server's channel-max, from connection.tune (0: none)
	heartbeat  time.Duration // as tune-ok negotiated it (0: off)

	acct  *listen.ConnAccount // what the client's messages under way hold
	clock *listen.Clock       // the handshake's deadline, then idle: nothing either way
}

// unit is a method with its content header and body, if it carries them,
// or a heartbeat.
type unit struct {
	ch        uint16
	m         method
	hdr       *contentHeader
	body      []byte
	frames    [][]byte // every frame's bytes, in order
	heartbeat bool
	cost      int64  // what it took of the connection's account
	got       uint64 // the body bytes come so far
	chunked   bool   // the last of frames is a chunk of small frames (keep)
}

func newConn(p *Proxy, id int, client net.Conn) *conn {
	c := &conn{Pair: listen.NewPair(client), p: p, id: id, chans: map[uint16]*channel{}, channelMax: 1<<16 - 1}
	c.frameMax.Store(MaxFrame)
	c.acct = p.acct.Conn()
	return c
}

func (c *conn) serve() {
	// The handshake's clock, as the pgwire proxy's: the client's reads
	// fail once it passed, until connection.open-ok (fromServer ends
	// it). Until tune-ok says the heartbeat, the idle limit is
	// Limits.Idle; bytes either way are signs of life (the server's
	// deliveries to a consumer too).
	c.clock = listen.NewClock(c.Client, listen.Limits{Handshake: c.p.lim.Handshake, Idle: c.p.lim.Idle})
	defer c.acct.Close()
	defer c.Close()
	server, err := c.Dial(c.p.upstream)
	if err != nil {
		return // before the protocol header the client can be told nothing
	}
	c.server, c.toServer = server, bufio.NewWriterSize(server, 64<<10)
	rd := newFrameReader(c.clock.Reader(), &c.frameMax)
	rd.acct = c.acct
	h, err := rd.header()
	if err != nil || !c.sendServer(h, true) {
		return
	}
	if !bytes.Equal(h, protocolHeader) {
		c.blind(rd.r, fmt.Sprintf("a client opened with %q, not AMQP 0-9-1 (TLS, or AMQP 1.0)", h))
		return
	}
	go c.fromServer()
	c.fromClient(rd)
}

// blind relays both directions as they are: a protocol the proxy does not
// read. Every waiting trigger fails.
func (c *conn) blind(r io.Reader, why string) {
	c.p.failAll(&fault.Unclassifiable{Reason: why + ": the proxy can only relay it blindly"})
	c.clock.Shaken() // its handshake is not the proxy's to time
	go func() {
		_, _ = io.Copy(c.Writer(), c.server)
		c.Close()
	}()
	_, _ = io.Copy(c.server, r)
}

// sendServer forwards bytes to the server, flushing when asked.
func (c *conn) sendServer(b []byte, flush bool) bool {
	c.srvMu.Lock()
	defer c.srvMu.Unlock()
	if _, err := c.toServer.Write(b); err != nil {
		return false
	}
	return !flush || c.toServer.Flush() == nil
}

// sendFrames forwards a unit's frames to one side.
func sendFrames(u *unit, send func([]byte, bool) bool, flush bool) bool {
	for i, f := range u.frames {
		if !send(f, flush && i == len(u.frames)-1) {
			return false
		}
	}
	return true
}

func (c *conn) fromClient(rd *frameReader) {
	defer c.Close()
	for {
		if !rd.buffered() && !c.sendServer(nil, true) { // before waiting for more, what was sent goes out
			return
		}
		f, err := rd.next()
		if err == io.EOF { // the client is done: its answers still come
			c.HalfClose(func() error {
				if !c.sendServer(nil, true) {
					return net.ErrClosed
				}
				return nil
			})
			return
		}
		if err == nil && c.closingFrame(f, fromClient) {
			c.acct.Release(f.cost) // dropped
			continue
		}
		var u *unit
		if err == nil {
			u, err = c.assemble(f, fromClient)
		}
		if tl, ok := err.(*tooLarge); ok {
			c.failChannel(tl.ch, 406, tl.Error(), methodID{60, 40}) // basic.publish
			continue
		}
		if err != nil {
			c.refuse(err)
			return
		}
		if u != nil {
			ok := c.clientUnit(u, rd.buffered())
			c.acct.Release(u.cost) // forwarded: its frames are gone
			if !ok {
				return
			}
		}
	}
}

// refuse closes a connection whose client sent what the broker refuses,
// with connection.close and the broker's kind of reply code.
func (c *conn) refuse(err error) {
	var ce *connError
	if !errors.As(err, &ce) || !c.sendServer(nil, true) {
		return
	}
	if c.Write(closeFrame(0, ce.code, ce.text, methodID{}), true) {
		listen.Linger(c.Client, lingerTimeout)
	}
}

// clientUnit applies what the triggers say about a client's method and
// forwards it.
func (c *conn) clientUnit(u *unit, more bool) bool {
	if u.heartbeat {
		return c.sendServer(u.frames[0], !more)
	}
	x, tag, tx := c.noteClient(u)
	ev := c.event(u, x)
	ev.Tag, ev.Tx = tag, tx
	a := c.p.strikeOn(x)
	if a != nil && a.Do == fault.Duplicate {
		return c.publishTwice(a, u, ev, more)
	}
	if a != nil && (a.Trigger.Boundary == Request || a.Do == fault.Error) {
		ev.Fault = a.Trigger.String()
		if a.Do != fault.Delay {
			return c.strikeRequest(a, u, ev)
		}
		if !c.sendServer(nil, true) || !a.Hold(c.Done, c.Close, func() bool { return true }) {
			return false
		}
		a = nil // the delay has passed: the method goes on
	}
	k := c.expect(u, x, a, c.p.record(ev), tag)
	held := k != nil
	if !sendFrames(u, c.sendServer, !more || held) {
		return false
	}
	return !held || c.barrier(k)
}

// strikeRequest applies a kill, cut or error before the method reaches
// the server: it never does.
func (c *conn) strikeRequest(a *Armed, u *unit, ev Event) bool {
	ev.Dropped = true
	c.p.record(ev)
	if !c.sendServer(nil, true) { // what the client sent before goes on first
		return false
	}
	if a.Do == fault.Error {
		a.Finish(nil)
		c.failChannel(u.ch, 406, fmt.Sprintf("PRECONDITION_FAILED - outboxdrill: the drill failed this %s; it was not sent to the broker", u.m.name()), u.m.id)
		return true
	}
	return a.Hold(c.Done, c.Close, func() bool { return true })
}

// barrier waits until the held answer's fault has struck: nothing the
// client sent after the method reaches the server first.
func (c *conn) barrier(k *call) bool {
	return c.Await(k.answered, c.p.lim.ReplyWait, func() bool {
		if !c.forget(k) {
			return false
		}
		k.strike.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("no answer to %s on channel %d came within %v", k.x.method, k.ch, c.p.lim.ReplyWait)})
		return true
	})
}

func (c *conn) fromServer() {
	defer c.Close()
	rd := newFrameReader(c.clock.Touching(c.server), &c.frameMax)
	for {
		if !rd.buffered() && !c.Write(nil, true) { // before waiting for more, what was sent goes out
			return
		}
		f, err := rd.next()
		if err == nil && c.closingFrame(f, fromServer) {
			continue
		}
		var u *unit
		if err == nil {
			u, err = c.assemble(f, fromServer)
		}
		if tl, ok := err.(*tooLarge); ok {
			c.failChannel(tl.ch, 311, fmt.Sprintf("CONTENT_TOO_LARGE - outboxdrill amqp proxy: a message of %d bytes from the broker is over its cap of %d", tl.size, MaxContent), methodID{})
			continue
		}
		if u != nil && !u.heartbeat && u.m.name() == "connection.open-ok" {
			c.opened()
		}
		var ce *connError
		if errors.As(err, &ce) {
			// What the proxy cannot relay exactly: the client learns why.
			c.Write(closeFrame(0, ce.code, "outboxdrill amqp proxy: the broker sent "+ce.text, methodID{}), true)
		}
		if err != nil || u != nil && !c.serverUnit(u, rd.buffered()) {
			return
		}
	}
}

// opened ends the handshake's clock: from connection.open-ok on, the
// connection is cut only when nothing crossed it either way for twice the
// heartbeat tune-ok negotiated, or Limits.Idle with heartbeats off.
func (c *conn) opened() {
	c.mu.Lock()
	hb := c.heartbeat
	c.mu.Unlock()
	if hb > 0 {
		c.clock.SetIdle(2 * hb)
	}
	c.clock.Shaken()
}

// serverUnit passes a server's method on, or holds it for a fault: a
// confirm or -ok a trigger holds, or a method a trigger counts.
func (c *conn) serverUnit(u *unit, more bool) bool {
	if u.heartbeat {
		return c.Write(u.frames[0], !more)
	}
	x, calls, answers := c.noteServer(u)
	defer func() {
		for _, k := range calls {
			close(k.answered)
		}
	}()
	ev := c.event(u, x)
	ev.Answers = answers
	a := c.p.strikeOf(calls, x)
	if a == nil {
		c.p.record(ev)
		return sendFrames(u, c.Write, !more)
	}
	ev.Fault = a.Trigger.String()
	switch a.Do {
	case fault.Drop: // swallowed: the channel goes on, as if it never came
		ev.Dropped = true
		c.p.record(ev)
		a.Finish(nil)
		return true
	case fault.Duplicate:
		return c.deliverTwice(a, u, x, ev)
	}
	if a.Do == fault.Error {
		ev.Dropped = true
		c.p.record(ev)
		a.Finish(nil)
		c.failChannel(u.ch, 406, fmt.Sprintf("PRECONDITION_FAILED - outboxdrill: the drill failed this %s; the client never got it", u.m.name()), u.m.id)
		return true
	}
	c.p.record(ev)
	if !c.Write(nil, true) { // what came before reaches the client first
		return false
	}
	return a.Hold(c.Done, c.Close, func() bool { return sendFrames(u, c.Write, true) })
}

// strikeOf is the trigger of a held answer, else one that counts the
// server's method.
func (p *Proxy) strikeOf(calls []*call, x crossing) *Armed {
	var a *Armed
	for _, k := range calls {
		switch {
		case a == nil:
			a = k.strike
		default: // two triggers on one answer: the first holds it
			k.strike.Finish(&fault.Unclassifiable{Reason: "another trigger held the same answer"})
		}
	}
	if a != nil {
		return a
	}
	return p.strikeOn(x)
}

// event is what the history keeps of a unit: a method the history does
// not read keeps its name only (so never a credential).
func (c *conn) event(u *unit, x crossing) Event {
	m := &u.m
	ev := Event{Conn: c.id, Channel: u.ch, Method: m.name(), FromServer: x.fromServer, Kind: x.kind}
	if x.kind == KindOther {
		return ev
	}
	ev.Exchange, ev.RoutingKey, ev.Queue, ev.ConsumerTag = m.exchange, m.routingKey, x.queue, m.consumerTag
	ev.DeliveryTag, ev.Multiple, ev.Requeue, ev.Redelivered = m.deliveryTag, m.multiple, m.requeue, m.redelivered
	ev.ReplyCode, ev.ReplyText = m.replyCode, m.replyText
	ev.NoAck = x.noAck
	if u.hdr != nil {
		props := u.hdr.props
		ev.Properties, ev.Body = &props, u.body
	}
	return ev
}
