package amqp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// rawConn is a hand-driven AMQP client, for what no library sends.
type rawConn struct {
	t *testing.T
	net.Conn
}

func sstr(s string) []byte { return append([]byte{byte(len(s))}, s...) }

// rawOpen connects to addr as guest and opens the connection (and channel
// 1 when channel is set), agreeing to frameMax and heartbeat.
func rawOpen(t *testing.T, addr string, channel bool) *rawConn {
	return rawOpenTuned(t, addr, channel, 2047, 0)
}

// rawOpenTuned is rawOpen answering the tune with channelMax and heartbeat.
func rawOpenTuned(t *testing.T, addr string, channel bool, channelMax, heartbeat uint16) *rawConn {
	t.Helper()
	c := rawConnTo(t, addr)
	c.send(protocolHeader)
	c.expect("connection.start")
	args := append([]byte{0, 0, 0, 0}, sstr("PLAIN")...)
	args = binary.BigEndian.AppendUint32(args, 12)
	args = append(append(args, "\x00guest\x00guest"...), sstr("en_US")...)
	c.send(methodFrameOf(0, 10, 11, args...))
	c.expect("connection.tune")
	tune := binary.BigEndian.AppendUint16(nil, channelMax)
	tune = binary.BigEndian.AppendUint32(tune, 128<<10)
	c.send(methodFrameOf(0, 10, 31, binary.BigEndian.AppendUint16(tune, heartbeat)...))
	c.send(methodFrameOf(0, 10, 40, append(append(sstr("/"), sstr("")...), 0)...))
	c.expect("connection.open-ok")
	if channel {
		c.send(methodFrameOf(1, 20, 10, sstr("")...))
		c.expect("channel.open-ok")
	}
	return c
}

// rawConnTo connects to addr, saying nothing yet.
func rawConnTo(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, Conn: nc}
}

func (c *rawConn) send(b ...[]byte) {
	c.t.Helper()
	if _, err := c.Write(bytes.Join(b, nil)); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one frame within a minute: its method's name and reply code
// and text, if a method. (A broker working through a million empty frames
// took over 10 s on a loaded 2-core machine; the bound is only for a
// broker that never answers.)
func (c *rawConn) read() (string, error) {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	head := make([]byte, 7)
	if _, err := io.ReadFull(c, head); err != nil {
		return "", err
	}
	p := make([]byte, binary.BigEndian.Uint32(head[3:7])+1)
	if _, err := io.ReadFull(c, p); err != nil {
		return "", err
	}
	if head[0] != frameMethod {
		return fmt.Sprintf("frame type %d", head[0]), nil
	}
	m, err := parseMethod(p[:len(p)-1])
	if err != nil {
		return "", err
	}
	if m.replyCode != 0 {
		return fmt.Sprintf("%s %d %s", m.name(), m.replyCode, m.replyText), nil
	}
	return m.name(), nil
}

func (c *rawConn) expect(name string) {
	c.t.Helper()
	got, err := c.read()
	if err != nil || got != name {
		c.t.Fatalf("got %q (%v), want %s", got, err, name)
	}
}

// publishFrames are a basic.publish to the default exchange on channel 1
// and a content header announcing size body bytes.
func publishFrames(size uint64) []byte {
	pub := methodFrameOf(1, 60, 40, append(append([]byte{0, 0}, sstr("")...), append(sstr("amqpnats-none"), 0)...)...)
	hdr := append([]byte{0, 60, 0, 0}, binary.BigEndian.AppendUint64(nil, size)...)
	return append(pub, encodeFrame(frameHeader, 1, append(hdr, 0, 0))...)
}
