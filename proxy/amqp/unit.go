package amqp

import (
	"fmt"
	"time"
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
// Frames of other channels may come between a message's frames.
func (c *conn) assemble(f frame, dir int) (*unit, error) {
	if f.typ == frameHeartbeat {
		return &unit{frames: [][]byte{f.raw}, heartbeat: true}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.channel(f.channel)
	u := ch.in[dir]
	switch {
	case f.typ == frameMethod && u != nil:
		return nil, unexpected("expected content for %s on channel %d, got a method", u.m.name(), f.channel)
	case f.typ == frameMethod:
		return c.methodFrame(f, ch, dir)
	case u == nil || f.typ == frameHeader && u.hdr != nil || f.typ == frameBody && u.hdr == nil:
		return nil, unexpected("a content frame out of place on channel %d", f.channel)
	case f.typ == frameHeader:
		h, ok := parseContentHeader(f.payload)
		if !ok {
			return nil, &connError{code: 502, text: "SYNTAX_ERROR - a malformed content header"}
		}
		if h.bodySize > MaxContent || uint64(c.assembling[dir])+h.bodySize > MaxContent {
			ch.in[dir] = nil
			return nil, &tooLarge{ch: f.channel, size: h.bodySize}
		}
		c.assembling[dir] += int(h.bodySize)
		u.hdr = &h
	default:
		if uint64(len(u.body)+len(f.payload)) > u.hdr.bodySize {
			return nil, unexpected("a body longer than its content header says on channel %d", f.channel)
		}
		u.body = append(u.body, f.payload...)
	}
	u.frames = append(u.frames, f.raw)
	if uint64(len(u.body)) < u.hdr.bodySize {
		return nil, nil
	}
	ch.in[dir] = nil
	c.assembling[dir] -= int(u.hdr.bodySize)
	return u, nil
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
	u := &unit{ch: f.channel, m: m, frames: [][]byte{f.raw}}
	if m.name() == "connection.tune-ok" && m.frameMax > 8 {
		c.frameMax.Store(min(MaxFrame, int64(m.frameMax)-8))
	}
	if !m.info.content {
		return u, nil
	}
	ch.in[dir] = u
	return nil, nil
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
		t := time.NewTimer(replyWait)
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
	for dir, u := range ch.in {
		if u != nil && u.hdr != nil {
			c.assembling[dir] -= int(u.hdr.bodySize)
		}
	}
	ch.in = [2]*unit{}
}
