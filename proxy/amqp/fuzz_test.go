package amqp

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// methodFrame builds a method frame from its class, method and argument
// bytes.
func methodFrameOf(ch uint16, class, method uint16, args ...byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, method)
	return encodeFrame(frameMethod, ch, append(p, args...))
}

func amqpSeeds() [][]byte {
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	publish := methodFrameOf(1, 60, 40, cat([]byte{0, 0}, str("ex"), str("rk"), []byte{0})...)
	// A content header: class 60, weight 0, body size 2, message-id and
	// headers {a: "b", n: {}} set.
	table := cat(str("a"), []byte{'S', 0, 0, 0, 1, 'b'}, str("n"), []byte{'F', 0, 0, 0, 0})
	props := cat([]byte{0x20, 0x80}, binary.BigEndian.AppendUint32(nil, uint32(len(table))), table, str("e1"))
	header := encodeFrame(frameHeader, 1, cat([]byte{0, 60, 0, 0}, binary.BigEndian.AppendUint64(nil, 2), props))
	body := encodeFrame(frameBody, 1, []byte("hi"))
	deliver := methodFrameOf(1, 60, 60, cat(str("ctag"), binary.BigEndian.AppendUint64(nil, 7), []byte{1}, str(""), str("q"))...)
	ack := methodFrameOf(1, 60, 80, cat(binary.BigEndian.AppendUint64(nil, 7), []byte{1})...)
	closeCh := closeFrame(1, 406, "PRECONDITION_FAILED - x", methodID{60, 40})
	tune := methodFrameOf(0, 10, 31, 0, 0, 0, 0, 0x10, 0, 0, 60)
	heartbeat := encodeFrame(frameHeartbeat, 0, nil)
	return [][]byte{
		cat(publish, header, body), cat(deliver, header, body, ack), cat(tune, heartbeat, closeCh),
		cat(publish, deliver), cat(header, body), cat(publish, header, encodeFrame(frameBody, 1, []byte("toolong"))),
		{frameMethod, 0, 0, 0xff, 0xff, 0xff, 0xff}, cat(publish[:len(publish)-1], []byte{0}),
	}
}

// fuzzFrames reads arbitrary bytes as one side's frames, with small
// limits so that the fuzzer reaches them: never a panic; each frame's
// bytes are the input's, in order, and within the cap; what the proxy
// reads of them (methods, content headers and field tables, assembly into
// messages, channel bookkeeping) never panics either.
func fuzzFrames(t *testing.T, in []byte, dir int) {
	c := &conn{chans: map[uint16]*channel{}, channelMax: 16}
	c.frameMax.Store(256)
	rd := newFrameReader(bytes.NewReader(in), &c.frameMax)
	var consumed []byte
	for {
		f, err := rd.next()
		if err != nil {
			return
		}
		if len(f.raw) > int(c.frameMax.Load())+8 && len(f.raw) > 256+8 {
			t.Fatalf("a frame of %d bytes over the cap", len(f.raw))
		}
		consumed = append(consumed, f.raw...)
		if !bytes.HasPrefix(in, consumed) {
			t.Fatalf("forwarded bytes %q are not the input's %q", consumed, in)
		}
		u, err := c.assemble(f, dir)
		if err != nil || u == nil || u.heartbeat {
			continue
		}
		if dir == fromClient {
			c.noteClient(u)
		} else {
			c.noteServer(u)
		}
		_ = c.event(u, crossing{kind: KindPublish})
	}
}

// FuzzAMQPClient reads arbitrary client bytes as frames.
func FuzzAMQPClient(f *testing.F) {
	for _, s := range amqpSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzFrames(t, in, fromClient) })
}

// FuzzAMQPServer reads arbitrary server bytes as frames.
func FuzzAMQPServer(f *testing.F) {
	for _, s := range amqpSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) { fuzzFrames(t, in, fromServer) })
}
