package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// Value is one RESP2 or RESP3 value, as read off the wire.
type Value struct {
	Type  byte    // the RESP type byte: + - : $ * % ~ > _ , # ! = (
	Str   string  // a string's, error's or number's text
	Null  bool    // a null bulk string or array, or RESP3 _
	Elems []Value // an array's, set's or push's elements; a map's keys and values in turn
	// Streamed: the reply was over MaxReplyBuffer, so the proxy passed it
	// on to the client as it came and kept only its type.
	Streamed bool
}

// Err reports whether the value is an error reply (simple or bulk).
func (v Value) Err() bool { return v.Type == '-' || v.Type == '!' }

// Strings returns an array's elements as strings.
func (v Value) Strings() []string {
	out := make([]string, len(v.Elems))
	for i, e := range v.Elems {
		out[i] = e.Str
	}
	return out
}

func (v Value) String() string {
	switch {
	case v.Streamed:
		return "(streamed " + string(v.Type) + ")"
	case v.Null:
		return "(nil)"
	case v.Elems != nil || v.Type == '*' || v.Type == '%' || v.Type == '~' || v.Type == '>':
		parts := make([]string, len(v.Elems))
		for i, e := range v.Elems {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, " ") + "]"
	case v.Type == '-' || v.Type == '!':
		return "ERR(" + v.Str + ")"
	}
	return v.Str
}

// The proxy's limits on what one client sends and on what it keeps of a
// reply. docs/drill-your-own-service.md ("Limits") says why each.
const (
	// MaxRequest bounds one command: all its arguments with their framing.
	// Redis's own cap on one argument is its proto-max-bulk-len (512 MB by
	// default); the proxy keeps a command whole before forwarding it (to
	// match it against the triggers and record it), so it refuses one an
	// eighth of that size, far above what a service's outbox sends.
	MaxRequest = 64 << 20
	// MaxInline bounds an inline command's line, and each count and length
	// line of a multibulk one: Redis's PROTO_INLINE_MAX_SIZE.
	MaxInline = 64 << 10
	// MaxArgs bounds a command's argument count: the 1024*1024 Redis itself
	// enforced before it allowed up to INT_MAX.
	MaxArgs = 1 << 20
	// MaxReplyBuffer bounds what the proxy keeps of one reply (its bytes,
	// plus what decoding it costs) to hold it for a fault or record it.
	// A larger reply is not refused: it streams on to the client as it
	// comes, and cannot be held (a trigger on it fails as unclassifiable).
	MaxReplyBuffer = 64 << 20
	// MaxReplyDepth bounds how deep a reply nests. A command's reply nests
	// a few levels; the deepest a real Redis sends is a Lua script's cyclic
	// table, which it cuts off at its Lua stack limit, about 8000 levels
	// down. A request never nests: a command is an array of bulk strings.
	MaxReplyDepth = 10000
	// ConnBytes bounds what one connection makes the proxy hold, on its
	// account (Limits.ConnBytes): each command's bytes as they arrive and
	// its words copied out of them, kept until its reply came (the call
	// keeps them to record the reply with its command); a command at
	// MaxRequest and a pipeline of ordinary ones behind it fit.
	ConnBytes = 2*MaxRequest + 16<<20
	// TotalBytes bounds the same for all the proxy's connections: one at
	// its cap and the ordinary ones beside it (an outbox's XADD is a few
	// kB). Past either cap the command is refused as a protocol error,
	// and the connection closes, as Redis closes one past its
	// client-query-buffer-limit.
	TotalBytes = ConnBytes + 64<<20
)

// Limits is what one proxy lets its clients cost (ListenWith gives each
// proxy its own; tests lower them on the proxy they build). Message is
// not used: a command's bytes are counted as they arrive.
type Limits struct {
	listen.Limits
	// MaxOtherEvents bounds the events kept of the commands the history
	// does not read (0: MaxOtherEvents).
	MaxOtherEvents int64
}

// DefaultLimits are the limits Listen gives a proxy: no deadlines, as
// Redis's own timeout 0. RESP has no handshake (a pool may open a
// connection and send nothing on it until it is needed); a client blocked
// in XREADGROUP BLOCK 0 is owed its answer for ever, and a RESP2
// subscriber or a pooled connection may be silent for ever, healthy; a
// proxy stricter than the server would cut them. A slot is bounded by
// MaxConns instead. A test (or a caller) that wants them sets Handshake
// and Idle: Idle then counts bytes either way, and never while a reply is
// owed.
func DefaultLimits() Limits {
	return Limits{Limits: listen.Limits{ConnBytes: ConnBytes, TotalBytes: TotalBytes, RecordBytes: fault.MaxRecordBytes},
		MaxOtherEvents: MaxOtherEvents}
}

// valueCost is what the proxy counts for each decoded value of a reply
// against MaxReplyBuffer, besides its bytes: a Value's size.
const valueCost = 64

// protoError is a client's command the proxy refuses, in Redis's words;
// the client gets it as an -ERR reply, then the connection closes (as
// Redis closes it after a protocol error).
type protoError struct{ msg string }

func (e *protoError) Error() string { return e.msg }

// reply is the -ERR line the client gets: no CR or LF inside, as Redis
// makes sure too.
func (e *protoError) reply() []byte {
	msg := strings.NewReplacer("\r", " ", "\n", " ").Replace(e.msg)
	return []byte("-ERR " + msg + "\r\n")
}

func protocolError(format string, args ...any) error {
	return &protoError{msg: "Protocol error: " + fmt.Sprintf(format, args...)}
}

var (
	// errTooDeep is a reply nested deeper than MaxReplyDepth.
	errTooDeep = fmt.Errorf("resp: a reply nested deeper than %d levels", MaxReplyDepth)
	// errMalformed is a reply that is not RESP.
	errMalformed = errors.New("resp: malformed reply")
)

// reader reads values and keeps the bytes each one was made of, so that
// the proxy forwards exactly what it read. It never recurses, allocates
// only for bytes that arrived (never for a length announced), and keeps at
// most its limits.
type reader struct {
	r   *bufio.Reader
	raw []byte
	hdr []byte // the current count or length line

	maxBuf, maxLine, maxArgs, maxDepth int
	// acct is a client's share of the proxy's account (nil for the
	// server's replies), tab what the command being read holds of it.
	acct *listen.ConnAccount
	tab  *listen.Tab

	// A reply only: once the reply's bytes and decoding cost (cost) would
	// pass maxBuf, what it kept so far and every byte after go to stream,
	// and the reply is no longer decoded. nil: past maxBuf is an error.
	stream    func([]byte) error
	streaming bool
	cost      int
	typ       byte // the reply's first type byte
	stack     []frame
}

// frame is an aggregate being read.
type frame struct {
	v    Value // its type and, unless streaming, the elements so far
	left int   // elements still to come
	attr bool  // an attribute: the value it annotates comes after it
}

// bufSize is the read buffer, and the largest piece of a bulk string read
// at once.
const bufSize = 64 << 10

// newReader reads what a client sends: commands.
func newReader(r io.Reader) *reader {
	return &reader{r: bufio.NewReaderSize(r, bufSize), maxBuf: MaxRequest, maxLine: MaxInline, maxArgs: MaxArgs, maxDepth: MaxReplyDepth}
}

// newReplyReader reads what the server sends: replies, streaming one over
// MaxReplyBuffer to stream.
func newReplyReader(r io.Reader, stream func([]byte) error) *reader {
	rd := newReader(r)
	rd.maxBuf, rd.stream = MaxReplyBuffer, stream
	return rd
}

// buffered reports whether more bytes are already read ahead.
func (r *reader) buffered() bool { return r.r.Buffered() > 0 }

// begin starts a value: a large buffer from the last one is let go.
func (r *reader) begin() {
	if cap(r.raw) > 1<<20 {
		r.raw = nil
	}
	r.raw, r.cost, r.streaming = r.raw[:0], 0, false
}

// command reads one client command: an array of bulk strings, or an
// inline command (a line of words, as redis-cli and telnet send). A
// command Redis would refuse as a protocol error is a *protoError; so is
// one over the proxy's limits. An empty command (an empty line, *0, *-1)
// is none: Redis ignores it too.
func (r *reader) command() ([]string, []byte, error) {
	r.tab = r.acct.Tab() // the last command's went with its call
	r.begin()
	b, err := r.r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if b[0] != '*' {
		if err := r.line("too big inline request"); err != nil {
			return nil, nil, err
		}
		if err := r.take(len(r.hdr)); err != nil { // the words copied out
			return nil, nil, err
		}
		return strings.Fields(string(r.hdr)), r.raw, nil
	}
	if err := r.line("too big mbulk count string"); err != nil {
		return nil, nil, err
	}
	n, err := strconv.Atoi(string(r.hdr[1:]))
	if err != nil || n > r.maxArgs {
		return nil, nil, protocolError("invalid multibulk length")
	}
	if n <= 0 {
		return nil, r.raw, nil
	}
	args := make([]string, 0, min(n, 1024))
	for range n {
		if err := r.line("too big bulk count string"); err != nil {
			return nil, nil, err
		}
		if len(r.hdr) == 0 || r.hdr[0] != '$' {
			got := byte('\r')
			if len(r.hdr) > 0 {
				got = r.hdr[0]
			}
			return nil, nil, protocolError("expected '$', got '%c'", got)
		}
		m, err := strconv.Atoi(string(r.hdr[1:]))
		if err != nil || m < 0 || m > r.maxBuf {
			return nil, nil, protocolError("invalid bulk length (the outboxdrill proxy takes at most %d bytes)", r.maxBuf)
		}
		start := len(r.raw)
		if err := r.body(m + 2); err != nil {
			return nil, nil, err
		}
		if err := r.take(m + argCost); err != nil { // its copy, and its place in args
			return nil, nil, err
		}
		args = append(args, string(r.raw[start:start+m]))
	}
	return args, r.raw, nil
}

// argCost is what an argument costs besides its bytes: its string in the
// command's words.
const argCost = 16

// take takes n bytes for the command being read from the client's share
// of the account; past a cap, the command is a protocol error (the
// server's replies take nothing).
func (r *reader) take(n int) error {
	if err := r.tab.Take(int64(n)); err != nil {
		return protocolError("%v", listen.Named(err, "a command"))
	}
	return nil
}

// line reads a line of at most maxLine bytes before its CRLF into hdr
// (without the CRLF) and adds it to the value's bytes; a longer one is a
// protocol error, tooBig in Redis's words.
func (r *reader) line(tooBig string) error {
	r.hdr = r.hdr[:0]
	for {
		b, err := r.r.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			return err
		}
		r.hdr = append(r.hdr, b...)
		if len(r.hdr) > r.maxLine+2 {
			return protocolError("%s", tooBig)
		}
		if err == nil {
			break
		}
	}
	if err := r.add(r.hdr); err != nil {
		return err
	}
	r.hdr = trimCRLF(r.hdr)
	if len(r.hdr) > r.maxLine {
		return protocolError("%s", tooBig)
	}
	return nil
}

func trimCRLF(b []byte) []byte {
	b = b[:len(b)-1] // the \n
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// body reads n bytes (a bulk string and its CRLF) a piece at a time: only
// what arrived is ever allocated.
func (r *reader) body(n int) error {
	for n > 0 {
		k := min(n, bufSize)
		b, err := r.r.Peek(k)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if err := r.add(b); err != nil {
			return err
		}
		if _, err := r.r.Discard(k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// add keeps b as part of the value's bytes: in raw while the value fits
// maxBuf, else (a reply) on to stream; a command over maxBuf is refused.
func (r *reader) add(b []byte) error {
	if !r.streaming && len(r.raw)+r.cost+len(b) > r.maxBuf {
		if r.stream == nil {
			return &protoError{msg: fmt.Sprintf("Protocol error: a command of more than %d bytes (the outboxdrill proxy's cap)", r.maxBuf)}
		}
		if err := r.stream(r.raw); err != nil {
			return err
		}
		r.raw, r.streaming = r.raw[:0], true
	}
	if r.streaming {
		return r.stream(b)
	}
	if err := r.take(len(b)); err != nil { // as the bytes arrive
		return err
	}
	r.raw = append(r.raw, b...)
	return nil
}

// next reads one reply, iteratively (an explicit stack, never the
// goroutine's): a reply nested MaxReplyDepth deep costs a slice of that
// many frames. raw is valid until the next call; a reply that streamed
// has none, and its Value only its type.
func (r *reader) next() (Value, []byte, error) {
	r.begin()
	r.stack = r.stack[:0]
	r.typ = 0
	for {
		v, n, err := r.item()
		if err != nil {
			return Value{Type: r.typ}, r.raw, err
		}
		if n > 0 || v.Type == '|' { // an aggregate with elements to come
			if len(r.stack) >= r.maxDepth {
				return Value{Type: r.typ}, r.raw, errTooDeep
			}
			if !r.streaming && v.Type != '|' {
				v.Elems = make([]Value, 0, min(n, 1024))
				r.cost += cap(v.Elems) * valueCost
			}
			r.stack = append(r.stack, frame{v: v, left: n, attr: v.Type == '|'})
			continue
		}
		// v is whole: it is an element of the aggregate on top.
		for {
			if len(r.stack) == 0 {
				if r.streaming {
					return Value{Type: r.typ, Streamed: true}, nil, nil
				}
				return v, r.raw, nil
			}
			f := &r.stack[len(r.stack)-1]
			if f.attr && f.left == 0 {
				// The value an attribute annotates stands in its place.
				r.stack = r.stack[:len(r.stack)-1]
				continue
			}
			if !r.streaming && !f.attr {
				f.v.Elems = append(f.v.Elems, v)
			}
			f.left--
			if f.left > 0 || f.attr {
				break
			}
			v = f.v
			r.stack = r.stack[:len(r.stack)-1]
		}
	}
}

// item reads one value's header, and its body unless it is an aggregate:
// n is then how many elements follow (a map's keys and values counted
// apart).
func (r *reader) item() (v Value, n int, err error) {
	b, err := r.r.Peek(1)
	if err != nil {
		return v, 0, err
	}
	v.Type = b[0]
	if r.typ == 0 {
		r.typ = v.Type
	}
	if !r.streaming {
		r.cost += valueCost
	}
	switch v.Type {
	case '+', '-', ':', ',', '#', '(', '_':
		// A simple line may be long (an error a script made): it is
		// read a piece at a time, like a bulk string.
		start := len(r.raw)
		for {
			b, err := r.r.ReadSlice('\n')
			if err != nil && err != bufio.ErrBufferFull {
				return v, 0, err
			}
			if err := r.add(b); err != nil {
				return v, 0, err
			}
			if err == nil {
				break
			}
		}
		if v.Type == '_' {
			v.Null = true
		} else if !r.streaming {
			v.Str = string(trimCRLF(r.raw[start:])[1:])
			r.cost += len(v.Str)
		}
		return v, 0, nil
	case '$', '!', '=', '*', '~', '>', '%', '|':
	default:
		return v, 0, fmt.Errorf("%w: unknown type byte %q", errMalformed, v.Type)
	}
	if err := r.line("too big count string"); err != nil {
		return v, 0, err
	}
	n, err = strconv.Atoi(string(r.hdr[1:]))
	if err != nil || n > 1<<40 {
		return v, 0, fmt.Errorf("%w: bad length %q", errMalformed, r.hdr[1:])
	}
	if n < 0 {
		v.Null = true
		return v, 0, nil
	}
	switch v.Type {
	case '$', '!', '=':
		start := len(r.raw)
		if err := r.body(n + 2); err != nil {
			return v, 0, err
		}
		if !r.streaming {
			v.Str = string(r.raw[start : start+n])
			r.cost += n
		}
		return v, 0, nil
	case '%', '|':
		n *= 2
	}
	if n == 0 {
		v.Elems = []Value{}
	}
	return v, n, nil
}

// isProto reports whether err is a command the proxy refuses with an
// -ERR reply.
func isProto(err error) (*protoError, bool) {
	var pe *protoError
	return pe, errors.As(err, &pe)
}
