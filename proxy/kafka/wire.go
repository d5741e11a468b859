package kafka

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// The proxy's limits. Each bounds what one peer can make the proxy keep.
const (
	// MaxMessage bounds one request or response (its size prefix). The
	// broker takes requests up to socket.request.max.bytes (100 MB by
	// default) and a consumer fetches up to fetch.max.bytes (50 MB); the
	// proxy keeps a message whole before forwarding it, so it refuses one
	// over 64 MB by closing the connection, as the broker closes one over
	// its own cap.
	MaxMessage = 64 << 20
	// MaxEntries bounds the topics, partitions and share acknowledgement
	// batches the proxy reads of one request. A length field never sizes
	// an allocation: entries are kept as they are read, each costing its
	// struct (a 20 MiB Fetch naming 3.5M empty topics built 786 MB when
	// topics were not counted), and a request past the cap is refused
	// unread: its connection closes (Kafka has no error for a request it
	// did not read) and the broker never sees it. A cluster's consumer
	// rarely names more than a few thousand partitions.
	MaxEntries = 1 << 16
)

// The proxy's default Limits (listen.Limits): what its clients may make
// it hold and how long they may keep a slot without a word.
const (
	// ConnBytes bounds what one connection makes the proxy hold: a request
	// at MaxMessage, what its batches build (MaxDecompressed) and the
	// entries it names, with a response on its way back beside it.
	ConnBytes = MaxMessage + MaxDecompressed + 16<<20
	// TotalBytes bounds the same for all connections of a proxy: one
	// connection at its cap and a few ordinary ones (a drill's services
	// send requests of a few MB at most, max.request.size is 1 MB by
	// default). Past it a request is refused (Produce: MESSAGE_TOO_LARGE)
	// or its connection closed, as the broker closes one over its caps.
	TotalBytes = ConnBytes + 64<<20
	// HandshakeTimeout bounds the time from accept to a client's first
	// whole request (PostgreSQL's proxy gives a startup one minute too).
	HandshakeTimeout = time.Minute
	// IdleTimeout closes a connection that sent nothing while the proxy
	// owed it no response: the broker's connections.max.idle.ms (10 min).
	IdleTimeout = 10 * time.Minute
	// MessageTimeout bounds the time from a request's size to its last
	// byte: a client trickling a large request holds its bytes only that
	// long.
	MessageTimeout = time.Minute
)

// Limits is what one proxy lets its clients cost: the bytes they make it
// hold, on its account, and the handshake, idle and message deadlines of
// its Clocks; and how long a client waits behind a held response.
type Limits struct {
	listen.Limits
	// ReplyWait bounds the wait behind a held response (0: ReplyWait).
	ReplyWait time.Duration
	// MaxOtherEvents bounds the events kept of requests the history does
	// not read (0: MaxOtherEvents).
	MaxOtherEvents int64
}

// DefaultLimits are the limits Listen gives a proxy.
func DefaultLimits() Limits {
	return Limits{
		Limits: listen.Limits{ConnBytes: ConnBytes, TotalBytes: TotalBytes, Handshake: HandshakeTimeout, Idle: IdleTimeout,
			Message: MessageTimeout, RecordBytes: fault.MaxRecordBytes},
		ReplyWait: ReplyWait, MaxOtherEvents: MaxOtherEvents,
	}
}

// readMessage reads a size-prefixed message, allocating only for bytes
// that arrived, and taking each growth of its buffer from tab before it is
// made (its error names the cap hit). began, if set, is told once the size
// arrived: the message's clock starts.
func readMessage(r *bufio.Reader, limit int, tab *listen.Tab, began func()) ([]byte, error) {
	head, err := r.Peek(4)
	if err != nil {
		if err == io.EOF && r.Buffered() > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if began != nil {
		began()
	}
	n := int32(binary.BigEndian.Uint32(head))
	if n < 0 || int64(n) > int64(limit) {
		return nil, fmt.Errorf("kafka: a message of %d bytes is over the proxy's cap of %d", n, limit)
	}
	var msg []byte
	for left := int(n) + 4; left > 0; {
		k := min(left, 64<<10)
		b, err := r.Peek(k)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(msg)+k > cap(msg) { // doubling, up to the message's size
			grow := min(max(len(msg), 64<<10), left)
			if err := tab.Take(int64(grow)); err != nil {
				return nil, listen.Named(err, fmt.Sprintf("a message of %d bytes", n))
			}
			msg = slices.Grow(msg, grow)
		}
		msg = append(msg, b...)
		r.Discard(k)
		left -= k
	}
	return msg, nil
}

// reader reads Kafka's types from a message; past its end, or on a
// malformed value, bad is set and zeros come back. It never allocates
// for a length it reads.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		if n >= 0 && n <= 16 {
			return make([]byte, n) // a fixed-size read decodes as zero
		}
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) i8() int8   { return int8(r.take(1)[0]) }
func (r *reader) i16() int16 { return int16(binary.BigEndian.Uint16(r.take(2))) }
func (r *reader) i32() int32 { return int32(binary.BigEndian.Uint32(r.take(4))) }
func (r *reader) i64() int64 { return int64(binary.BigEndian.Uint64(r.take(8))) }

func (r *reader) uuid() (id [16]byte) { copy(id[:], r.take(16)); return id }

func (r *reader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

// length reads a string's, bytes' or array's length: compact (uvarint
// plus one) in flexible versions, else int16 (strings) or int32. -1 is
// null.
func (r *reader) length(flexible, short bool) int {
	switch {
	case flexible:
		n := r.uvarint()
		if n > uint64(len(r.b))+1 {
			r.bad = true
			return -1
		}
		return int(n) - 1
	case short:
		return int(r.i16())
	}
	return int(r.i32())
}

func (r *reader) str(flexible bool) string {
	n := r.length(flexible, true)
	if n < 0 {
		return ""
	}
	return string(r.take(n))
}

func (r *reader) bytes(flexible bool) []byte {
	n := r.length(flexible, false)
	if n < 0 {
		return nil
	}
	return r.take(n)
}

// array reads an array's length and calls each for every element, while
// the reader is good.
func (r *reader) array(flexible bool, each func()) {
	n := r.length(flexible, false)
	if n > len(r.b) { // every element takes a byte at least
		r.bad = true
	}
	for i := 0; i < n && !r.bad; i++ {
		each()
	}
}

// tags skips a flexible version's tagged fields.
func (r *reader) tags(flexible bool) {
	if !flexible {
		return
	}
	for n := r.uvarint(); n > 0 && !r.bad; n-- {
		r.uvarint()
		r.take(int(min(r.uvarint(), uint64(len(r.b)+1))))
	}
}

// header is a request's header.
type header struct {
	key, version int16
	corr         int32
	flexible     bool // the request (and, but for ApiVersions, its response) uses a flexible header
	body         []byte
}

var errHeader = errors.New("kafka: a malformed request header")

// parseHeader reads a request's header (v1, or v2 in flexible versions:
// the client id stays a non-compact string).
func parseHeader(msg []byte) (header, error) {
	r := reader{b: msg[4:]}
	h := header{key: r.i16(), version: r.i16(), corr: r.i32()}
	if n := r.length(false, true); n > 0 { // the client id, nullable
		r.take(n)
	}
	h.flexible = isFlexible(h.key, h.version)
	r.tags(h.flexible)
	if r.bad {
		return h, errHeader
	}
	h.body = r.b
	return h, nil
}

// isFlexible reports whether an API's version uses flexible encoding, as
// kmsg knows it (false for an API it does not know).
func isFlexible(key, version int16) bool {
	first, ok := flexibleFrom()[key]
	return ok && version >= first
}

// flexibleFrom is each API's first flexible version, as kmsg knows it
// (read once: asking kmsg allocates a request).
var flexibleFrom = lazy.Value("Kafka first flexible versions", func() map[int16]int16 {
	m := map[int16]int16{}
	for k := int16(0); k < 200; k++ {
		req := kmsg.RequestForKey(k)
		if req == nil {
			continue
		}
		for v := int16(0); v <= req.MaxVersion(); v++ {
			if req.SetVersion(v); req.IsFlexible() {
				m[k] = v
				break
			}
		}
	}
	return m
})

// name is an API's name, as kmsg spells it (Produce, Fetch, …).
func name(key int16) string {
	if n := kmsg.NameForKey(key); n != "" {
		return n
	}
	return fmt.Sprintf("ApiKey(%d)", key)
}
