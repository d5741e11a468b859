package amqp

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/outboxdrill/runner/proxy/listen"
)

// The proxy's limits. Each bounds what one peer can make the proxy keep.
const (
	// MaxFrame bounds one frame's payload. AMQP lets the peers agree on
	// frame-max up to 4 GB (0: no limit); RabbitMQ caps it at 128 KB by
	// default, and no client needs more than a few MB. The proxy also holds
	// every frame to the frame-max the client agreed to in
	// connection.tune-ok, as the server does.
	MaxFrame = 64 << 20
	// MaxContent bounds the message bodies the proxy assembles at once on
	// one connection (a message is matched, recorded and held whole).
	// RabbitMQ 4 refuses a message over 16 MB (max_message_size), 3.x over
	// 128 MB; past the cap the client's channel is closed with RabbitMQ's
	// own 406 for a message over its max size, and a connection whose
	// server sends one is closed with 311 (CONTENT_TOO_LARGE).
	MaxContent = 64 << 20
	// maxTableDepth bounds how deeply a field table nests, as amqp091-go
	// bounds it: a deeper one is kept undecoded.
	maxTableDepth = 64
)

// Frame types (AMQP 0-9-1, 4.2.3).
const (
	frameMethod    = 1
	frameHeader    = 2
	frameBody      = 3
	frameHeartbeat = 8
	frameEnd       = 0xCE
)

// protocolHeader opens an AMQP 0-9-1 connection.
var protocolHeader = []byte("AMQP\x00\x00\x09\x01")

// frame is one frame as read off the wire.
type frame struct {
	typ     byte
	channel uint16
	payload []byte // aliases raw
	raw     []byte // every byte of the frame, as read
	cost    int64  // what it took of its connection's account (cap(raw))
}

// connError is what the proxy refuses of a peer: it closes the connection
// with connection.close and this reply code, as the server would.
type connError struct {
	code uint16
	text string
}

func (e *connError) Error() string { return fmt.Sprintf("amqp: %d %s", e.code, e.text) }

// frameError is RabbitMQ's 501, for a frame it cannot read.
func frameError(format string, args ...any) error {
	return &connError{code: 501, text: "FRAME_ERROR - " + fmt.Sprintf(format, args...)}
}

// frameReader reads frames, allocating only for bytes that arrived, never
// for a size announced.
type frameReader struct {
	r    *bufio.Reader
	max  *atomic.Int64       // the payload cap: MaxFrame, or less once frame-max is agreed
	acct *listen.ConnAccount // a client's share of the proxy's account (nil: the server's)
}

func newFrameReader(r io.Reader, max *atomic.Int64) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

func (r *frameReader) buffered() bool { return r.r.Buffered() > 0 }

// header reads the 8 bytes a client opens with.
func (r *frameReader) header() ([]byte, error) {
	b := make([]byte, 8)
	_, err := io.ReadFull(r.r, b)
	return b, err
}

// next reads one frame. Its bytes are taken from the account as they arrive
// (f.cost); whoever keeps the frame gives them back once it is gone.
func (r *frameReader) next() (frame, error) {
	head, err := r.r.Peek(7)
	if err != nil {
		if err == io.EOF && r.r.Buffered() > 0 {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	f := frame{typ: head[0], channel: binary.BigEndian.Uint16(head[1:3])}
	// In 64 bits: a size of 0xFFFFFFFF plus the 8 bytes around it is
	// 4294967303, not 7.
	total := int64(binary.BigEndian.Uint32(head[3:7])) + 8
	switch {
	case f.typ != frameMethod && f.typ != frameHeader && f.typ != frameBody && f.typ != frameHeartbeat:
		return frame{}, frameError("unknown frame type %d", f.typ)
	case total-8 > r.max.Load():
		return frame{}, frameError("a frame of %d bytes is over the frame-max of %d", total, r.max.Load()+8)
	}
	if err := r.read(&f, total); err != nil {
		r.acct.Release(f.cost)
		return frame{}, err
	}
	if f.raw[len(f.raw)-1] != frameEnd {
		r.acct.Release(f.cost)
		return frame{}, frameError("a frame does not end in 0xCE")
	}
	f.payload = f.raw[7 : len(f.raw)-1]
	return f, nil
}

// read reads a frame's total bytes a piece at a time, growing its buffer
// (and taking from the account) only as they arrive.
func (r *frameReader) read(f *frame, total int64) error {
	for left := total; left > 0; {
		k := int(min(left, 64<<10))
		b, err := r.r.Peek(k)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(f.raw)+k > cap(f.raw) {
			grown := min(total, max(2*int64(cap(f.raw)), 64<<10))
			if err := r.acct.Take(grown - f.cost); err != nil {
				return tooMuch(fmt.Sprintf("a frame of %d bytes", total), err)
			}
			f.raw, f.cost = append(make([]byte, 0, grown), f.raw...), grown
		}
		f.raw = append(f.raw, b...)
		r.r.Discard(k)
		left -= int64(k)
	}
	return nil
}

// tooMuch is the connection.close for what a client sent past the
// proxy's account: 311 CONTENT_TOO_LARGE, content larger than the server
// can accept at the present time
// (https://www.rabbitmq.com/amqp-0-9-1-reference#constants).
func tooMuch(what string, err error) error {
	return &connError{code: 311, text: "CONTENT_TOO_LARGE - outboxdrill amqp proxy: " + what + ": " + err.Error()}
}

// encodeFrame builds a frame around a payload.
func encodeFrame(typ byte, channel uint16, payload []byte) []byte {
	b := make([]byte, 7, 8+len(payload))
	b[0] = typ
	binary.BigEndian.PutUint16(b[1:3], channel)
	binary.BigEndian.PutUint32(b[3:7], uint32(len(payload)))
	return append(append(b, payload...), frameEnd)
}

// closeFrame is a channel.close (channel > 0) or connection.close
// (channel 0) with a reply code and text, naming the method it answers.
func closeFrame(channel uint16, code uint16, text string, failed methodID) []byte {
	class := uint16(20)
	if channel == 0 {
		class = 10
	}
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, closeMethod(class))
	p = binary.BigEndian.AppendUint16(p, code)
	if len(text) > 255 {
		text = text[:255]
	}
	p = append(append(p, byte(len(text))), text...)
	p = binary.BigEndian.AppendUint16(p, failed.class)
	p = binary.BigEndian.AppendUint16(p, failed.method)
	return encodeFrame(frameMethod, channel, p)
}

// closeMethod is the close method's id in a class: connection.close 50,
// channel.close 40.
func closeMethod(class uint16) uint16 {
	if class == 10 {
		return 50
	}
	return 40
}

// closeOkFrame is channel.close-ok on a channel.
func closeOkFrame(channel uint16) []byte {
	return encodeFrame(frameMethod, channel, []byte{0, 20, 0, 41})
}
