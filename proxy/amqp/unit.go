package amqp

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/outboxdrill/runner/proxy/listen"
)

// tooLarge is a client's message over MaxContent: its channel is closed,
// as RabbitMQ closes one for a message over its max_message_size.
type tooLarge struct {
	ch   uint16
	size uint64
}

func (e *tooLarge) Error() string {
	return fmt.Sprintf("PRECONDITION_FAILED - message size %d is larger than configured max size %d (the outboxdrill proxy's)", e.size, MaxContent)
}

// unexpected is RabbitMQ's 505, for a frame out of its place.
func unexpected(format string, args ...any) error {
	return &connError{code: 505, text: "UNEXPECTED_FRAME - " + fmt.Sprintf(format, args...)}
}

// assemble adds a frame to the message being assembled on its channel,
// and returns the unit once whole (nil while its content is to come).
// Frames of other channels may come between a message's frames. What a
// client's unit keeps is taken from the connection's account as it grows
// (u.cost); a unit dropped here gives it back.
func (c *conn) assemble(f frame, dir int) (*unit, error) {
	if f.typ == frameHeartbeat {
		return &unit{frames: [][]byte{f.raw}, heartbeat: true, cost: f.cost}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, err := c.channelFor(f, dir)
	if err != nil {
		return nil, err
	}
	u := ch.in[dir]
	switch {
	case f.typ == frameMethod && u != nil:
		return nil, unexpected("expected content for %s on channel %d, got a method", u.m.name(), f.channel)
	case f.typ == frameMethod:
		return c.methodFrame(f, ch, dir)
	case u == nil: // RabbitMQ's words
		return nil, unexpected("expected method frame, got non method frame instead")
	case f.typ == frameHeader && u.hdr != nil || f.typ == frameBody && u.hdr == nil:
		return nil, unexpected("a content frame out of place on channel %d", f.channel)
	case f.typ == frameHeader:
		return c.headerFrame(f, ch, u, dir)
	case len(f.payload) == 0:
		// An empty body frame carries nothing: RabbitMQ takes any number
		// of them within a body and goes on waiting for its bytes
		// (TestAnEmptyBodyFrameIsRabbitMQs), and the spec lets a peer
		// pass a body on in frames of its own cutting (4.2.6.2). The
		// proxy drops it: kept, each would cost a slice and the message
		// would never end.
		c.acctOf(dir).Release(f.cost)
		return nil, nil
	case u.got+uint64(len(f.payload)) > u.hdr.bodySize:
		return nil, unexpected("a body longer than its content header says on channel %d", f.channel)
	}
	u.got += uint64(len(f.payload))
	if err := c.keep(u, f, dir, 0); err != nil {
		return nil, err
	}
	return c.whole(ch, u, dir)
}

// headerFrame adds a content header to its message.
func (c *conn) headerFrame(f frame, ch *channel, u *unit, dir int) (*unit, error) {
	h, ok := parseContentHeader(f.payload)
	if !ok {
		return nil, &connError{code: 502, text: "SYNTAX_ERROR - a malformed content header"}
	}
	if h.bodySize > MaxContent || uint64(c.assembling[dir])+h.bodySize > MaxContent {
		c.dropUnit(ch, dir)
		c.acctOf(dir).Release(f.cost)
		return nil, &tooLarge{ch: f.channel, size: h.bodySize}
	}
	c.assembling[dir] += int(h.bodySize)
	u.hdr = &h
	if err := c.keep(u, f, dir, int64(decodedSize(h.props.Headers))); err != nil {
		return nil, err
	}
	return c.whole(ch, u, dir)
}

// keep adds a frame to its unit, with what it costs besides its bytes. A
// small body frame is copied into a chunk of the unit's own (its wire
// bytes as they came, frames back to back), so that a body in frames of
// a byte costs 9 bytes a byte, not a slice and an allocation each. A
// body's only frame is kept as it is: a chunk for it would only copy it
// (a 64 KB chunk per one-frame message was most of what an unarmed proxy
// did per publish).
func (c *conn) keep(u *unit, f frame, dir int, extra int64) error {
	m := c.acctOf(dir)
	n := len(u.frames)
	if f.typ == frameBody && len(f.raw) < smallFrame && (n > 2 || u.got < u.hdr.bodySize) {
		if u.chunked && cap(u.frames[n-1])-len(u.frames[n-1]) >= len(f.raw) {
			u.frames[n-1] = append(u.frames[n-1], f.raw...)
			m.Release(f.cost)
			return nil
		}
		size := chunkFor(u, f)
		if err := m.Take(size + frameSlot - f.cost); err != nil {
			m.Release(f.cost)
			return tooMuch(fmt.Sprintf("a message on channel %d", f.channel), err)
		}
		u.frames = append(u.frames, append(make([]byte, 0, size), f.raw...))
		u.cost += size + frameSlot
		u.chunked = true
		return nil
	}
	if err := m.Take(frameSlot + extra); err != nil {
		return tooMuch(fmt.Sprintf("a message on channel %d", f.channel), err)
	}
	u.frames = append(u.frames, f.raw)
	u.cost += f.cost + frameSlot + extra
	u.chunked = false
	return nil
}

// The chunks small body frames are kept in.
const (
	smallFrame = 4 << 10
	chunkSize  = 64 << 10
)

// chunkFor is the size of a new chunk for small frame f: room for f and
// the rest of the body in one more frame, or twice the last chunk when
// frames come smaller than that, at most chunkSize; so a small body
// costs about its size, and a body in frames of a byte a few chunks.
func chunkFor(u *unit, f frame) int64 {
	size := int64(len(f.raw)) + int64(u.hdr.bodySize-u.got) + 8
	if last := u.frames[len(u.frames)-1]; u.chunked {
		size = max(size, 2*int64(cap(last)))
	}
	return min(size, chunkSize)
}

// whole returns the unit once its body is all there, its frames' bodies
// copied into one (taken from the account too); nil before.
func (c *conn) whole(ch *channel, u *unit, dir int) (*unit, error) {
	if u.got < u.hdr.bodySize {
		return nil, nil
	}
	ch.in[dir] = nil
	c.assembling[dir] -= int(u.hdr.bodySize)
	if u.got == 0 {
		return u, nil
	}
	if err := c.acctOf(dir).Take(int64(u.got)); err != nil {
		return nil, tooMuch(fmt.Sprintf("a message of %d bytes on channel %d", u.got, u.ch), err)
	}
	u.cost += int64(u.got)
	u.body = make([]byte, 0, u.got)
	for _, b := range u.frames[2:] { // after the method and the content header
		u.body = appendPayloads(u.body, b)
	}
	return u, nil
}

// appendPayloads appends the payloads of the whole frames in b (one, or
// a chunk of them) to body.
func appendPayloads(body, b []byte) []byte {
	for len(b) >= 8 {
		n := int(binary.BigEndian.Uint32(b[3:7]))
		body = append(body, b[7:7+n]...)
		b = b[8+n:]
	}
	return body
}

// acctOf is the account a direction's frames count against: the client's
// (the server's are not the client's doing, nor refused for its cap).
func (c *conn) acctOf(dir int) *listen.ConnAccount {
	if dir == fromServer {
		return nil
	}
	return c.acct
}

// channelFor is the channel a frame is on (conn.mu held). The proxy keeps
// state per channel, so it keeps it only for what the server lets a
// client open: a client's frame on a channel it did not open is refused
// as RabbitMQ refuses it (504 CHANNEL_ERROR), and a channel.open past the
// negotiated channel_max with RabbitMQ's 530 NOT_ALLOWED and its words
// (TestChannelMaxIsRabbitMQs).
func (c *conn) channelFor(f frame, dir int) (*channel, error) {
	if c.chans[f.channel] != nil || dir == fromServer || f.channel == 0 {
		return c.channel(f.channel), nil
	}
	if f.typ != frameMethod || len(f.payload) < 4 || binary.BigEndian.Uint32(f.payload) != 20<<16|10 {
		return nil, &connError{code: 504, text: "CHANNEL_ERROR - expected 'channel.open'"}
	}
	open := len(c.chans)
	if c.chans[0] != nil {
		open--
	}
	if open >= c.channelMax {
		return nil, &connError{code: 530, text: fmt.Sprintf("NOT_ALLOWED - number of channels opened (%d) has reached the negotiated channel_max (%d)", open, c.channelMax)}
	}
	return c.channel(f.channel), nil
}

// methodFrame reads a method frame: whole, unless its content follows.
func (c *conn) methodFrame(f frame, ch *channel, dir int) (*unit, error) {
	m, err := parseMethod(f.payload)
	if err != nil {
		return nil, err
	}
	if dir == fromClient && !m.info.client || dir == fromServer && !m.info.server {
		return nil, &connError{code: 503, text: "COMMAND_INVALID - " + m.name() + " from the wrong side"}
	}
	u := &unit{ch: f.channel, m: m, frames: [][]byte{f.raw}, cost: f.cost}
	c.tune(&m)
	if !m.info.content {
		return u, nil
	}
	// A message under way costs its unit whatever its frames: a
	// half-sent message on each channel adds up.
	if err := c.acctOf(dir).Take(unitCost); err != nil {
		return nil, tooMuch(fmt.Sprintf("a message on channel %d", f.channel), err)
	}
	u.cost += unitCost
	ch.in[dir] = u
	return nil, nil
}

// tune keeps what connection.tune and tune-ok negotiate (conn.mu held):
// frame-max, channel-max (the client's, within the server's; 0 is no
// limit, 65535), and the heartbeat, from which the idle limit follows.
func (c *conn) tune(m *method) {
	switch m.name() {
	case "connection.tune":
		c.serverMax = int(m.channelMax)
		c.channelMax = cmp.Or(c.serverMax, 1<<16-1)
	case "connection.tune-ok":
		if m.frameMax > 8 {
			c.frameMax.Store(min(MaxFrame, int64(m.frameMax)-8))
		}
		c.channelMax = cmp.Or(int(m.channelMax), 1<<16-1)
		if c.serverMax > 0 {
			c.channelMax = min(c.channelMax, c.serverMax)
		}
		c.heartbeat = time.Duration(m.heartbeat) * time.Second
	}
}

// dropUnit gives up the message being assembled on a channel in one
// direction (conn.mu held).
func (c *conn) dropUnit(ch *channel, dir int) {
	u := ch.in[dir]
	ch.in[dir] = nil
	if u == nil {
		return
	}
	if u.hdr != nil {
		c.assembling[dir] -= int(u.hdr.bodySize)
	}
	c.acctOf(dir).Release(u.cost)
}

// closingFrame handles a frame on a channel the proxy is closing: it is
// dropped (the broker requeues what it delivered there), and the close
// handshake of its side ends with its channel.close-ok (or a channel.close
// of its own, which the proxy answers). A client that reopens the channel
// waits until the broker's side has closed too. Reports whether f was
// dropped.
func (c *conn) closingFrame(f frame, dir int) bool {
	c.mu.Lock()
	ch := c.chans[f.channel]
	if ch == nil || ch.closing == nil {
		c.mu.Unlock()
		return false
	}
	cl := ch.closing
	if dir == fromClient && cl.client {
		c.mu.Unlock()
		t := time.NewTimer(c.p.lim.ReplyWait)
		defer t.Stop()
		select {
		case <-cl.serverDone:
		case <-t.C:
		case <-c.Done:
		}
		c.mu.Lock()
		if c.chans[f.channel] == ch {
			delete(c.chans, f.channel)
		}
		c.mu.Unlock()
		return false
	}
	defer c.mu.Unlock()
	if f.typ == frameMethod {
		if m, err := parseMethod(f.payload); err == nil {
			c.closeHandshake(f.channel, cl, m.name(), dir)
		}
	}
	if cl.client && cl.server {
		delete(c.chans, f.channel)
	}
	return true
}

// closeHandshake notes one side's answer to the proxy's channel.close.
func (c *conn) closeHandshake(id uint16, cl *closing, name string, dir int) {
	if name != "channel.close-ok" && name != "channel.close" {
		return
	}
	if dir == fromServer && !cl.server {
		if name == "channel.close" {
			c.sendServer(closeOkFrame(id), true)
		}
		cl.server = true
		close(cl.serverDone)
	}
	if dir == fromClient && !cl.client {
		if name == "channel.close" {
			c.Write(closeOkFrame(id), true)
		}
		cl.client = true
	}
}

// failChannel closes a channel on both sides for an error fault (or a
// message over the cap): the broker is asked to close it (and requeues
// what it delivered there), the client gets the channel.close with code
// and text. Channel 0 is the connection: it closes.
func (c *conn) failChannel(id uint16, code uint16, text string, failed methodID) {
	if id == 0 {
		c.Write(closeFrame(0, 320, "CONNECTION_FORCED - "+text, failed), true)
		c.Close()
		return
	}
	c.mu.Lock()
	ch := c.channel(id)
	if ch.closing != nil {
		c.mu.Unlock()
		return
	}
	ch.closing = &closing{serverDone: make(chan struct{})}
	ch.release("the proxy closed the channel")
	c.unassemble(ch)
	c.mu.Unlock()
	c.p.record(Event{Conn: c.id, Channel: id, Method: "channel.close", FromServer: true, Kind: KindChannel, ReplyCode: code, ReplyText: text})
	c.sendServer(closeFrame(id, 200, "outboxdrill: the drill closed this channel", failed), true)
	c.Write(closeFrame(id, code, text, failed), true)
}

// unassemble gives up the messages being assembled on a channel that
// goes away (conn.mu held).
func (c *conn) unassemble(ch *channel) {
	c.dropUnit(ch, fromClient)
	c.dropUnit(ch, fromServer)
}
