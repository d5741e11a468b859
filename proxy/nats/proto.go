package nats

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
)

// The proxy's limits. Each bounds what one peer can make the proxy keep.
const (
	// MaxPayload bounds one message's headers and data. It is the hard
	// cap nats-server itself puts on its max_payload setting (64 MB): the
	// proxy keeps a message whole before forwarding it (to match it against
	// the triggers and record it), so it never reads one a server could
	// not have taken. Once the server's INFO came, its own max_payload
	// (1 MB by default) is the limit. Past it the client gets the server's
	// own -ERR 'Maximum Payload Violation' at the control line (nothing of
	// the payload read), then the connection closes.
	MaxPayload = 64 << 20
	// MaxControlLine bounds a protocol line (PUB foo 5, INFO {…}). The
	// server's max_control_line defaults to 4 KB; an INFO with the
	// connect_urls of a large cluster is longer, and a line is cheap to
	// keep, so the proxy takes up to 1 MB either way.
	MaxControlLine = 1 << 20
	// MaxPending bounds the replies the proxy awaits on one connection (a
	// publish's PubAck, an acknowledged ack's answer). Past it, a reply is
	// passed on unpaired: the publish it answers is left out of the
	// history (Proxy.Unpaired counts them) and a trigger on it fails as
	// unclassifiable. nats.go keeps at most 4000 async publishes in flight.
	MaxPending = 1 << 16
	// MaxSubs bounds the subscriptions the proxy remembers per connection,
	// to address the failure reply of an injected error.
	MaxSubs = 1 << 16
)

// bufSize is the read buffer, and the largest piece of a payload read at
// once.
const bufSize = 64 << 10

// msg is one protocol operation as read off the wire.
type msg struct {
	op      string   // upper case: PUB, HPUB, MSG, HMSG, SUB, UNSUB, CONNECT, INFO, PING, PONG, +OK, -ERR
	args    []string // the control line's words after op (CONNECT and INFO: none)
	json    []byte   // CONNECT's and INFO's JSON argument
	subject string   // PUB, HPUB, MSG, HMSG, SUB
	reply   string   // PUB, HPUB, MSG, HMSG: the reply subject, "" for none
	sid     string   // MSG, HMSG, SUB, UNSUB
	hdr     int      // HPUB, HMSG: the header bytes at the payload's start; else 0
	size    int      // PUB, HPUB, MSG, HMSG: the payload's bytes; else -1
	payload []byte   // headers then data
	raw     []byte   // every byte of the operation, as read
}

// header is the message's header block; data what follows it.
func (m *msg) header() []byte { return m.payload[:m.hdr] }
func (m *msg) data() []byte   { return m.payload[m.hdr:] }

// protoError is what the proxy refuses of a client, in the server's words
// (the text of its -ERR), before closing the connection as the server
// would.
type protoError struct{ text string }

func (e *protoError) Error() string { return "nats: " + e.text }

// line is the -ERR line the client gets.
func (e *protoError) line() []byte { return []byte("-ERR '" + oneLine(e.text) + "'\r\n") }

func oneLine(s string) string { return strings.NewReplacer("\r", " ", "\n", " ", "'", "\"").Replace(s) }

var (
	errUnknownOp   = &protoError{"Unknown Protocol Operation"}
	errControlLine = &protoError{"Maximum Control Line Exceeded"}
	errPayload     = &protoError{"Maximum Payload Violation"}
	errAuthTimeout = &protoError{"Authentication Timeout"} // no CONNECT within Limits.Handshake
)

// reader reads operations and keeps the bytes each was made of, so that
// the proxy forwards exactly what it read. It allocates only for bytes
// that arrived, never for a size announced.
type reader struct {
	r      *bufio.Reader
	raw    []byte
	args   []string // the last control line's words (msg.args)
	server bool     // reads what the server sends (MSG, INFO, …), else a client

	maxPayload, maxLine int // the limits: tests lower them
	// serverMax is the max_payload the server's INFO announced (0: none
	// yet): a client's message over it is refused at its control line, as
	// the server itself refuses it, not read whole first.
	serverMax *atomic.Int64
}

func newReader(r io.Reader, server bool) *reader {
	return &reader{r: bufio.NewReaderSize(r, bufSize), server: server, maxPayload: MaxPayload, maxLine: MaxControlLine}
}

// buffered reports whether more bytes are already read ahead.
func (r *reader) buffered() bool { return r.r.Buffered() > 0 }

// tls reports whether the next byte begins a TLS record (a handshake):
// from there on the connection is opaque.
func (r *reader) tls() bool {
	b, err := r.r.Peek(1)
	return err == nil && b[0] == 0x16
}

// next reads one operation. An operation the server would refuse, or one
// past the proxy's limits, is a *protoError.
func (r *reader) next() (msg, error) {
	if cap(r.raw) > 1<<20 {
		r.raw = nil // let a large message's buffer go
	}
	r.raw = r.raw[:0]
	line, err := r.line()
	if err != nil {
		return msg{}, err
	}
	line = strings.TrimLeft(line, " \t")
	i := strings.IndexAny(line, " \t")
	if i < 0 {
		i = len(line)
	}
	op, rest := line[:i], line[i:]
	// The op's own constant: ToUpper returns an upper-case op as it is, a
	// slice of the line, and each event keeping it kept the whole line.
	m := msg{op: ops[strings.ToUpper(op)], size: -1}
	if !r.known(m.op) {
		return msg{}, errUnknownOp
	}
	switch m.op {
	case "CONNECT", "INFO":
		m.json = []byte(strings.TrimSpace(rest))
	case "-ERR":
		m.args = []string{strings.TrimSpace(rest)}
	default:
		// Into the reader's own slice: args are read once, here, and a
		// fresh slice per operation was a good part of its cost.
		r.args = appendFields(r.args[:0], rest)
		m.args = r.args
	}
	limit := r.maxPayload
	if r.serverMax != nil {
		if s := int(r.serverMax.Load()); s > 0 && s < limit {
			limit = s
		}
	}
	if err := m.parseArgs(limit); err != nil {
		return msg{}, err
	}
	if err := r.body(&m); err != nil {
		return msg{}, err
	}
	m.raw = r.raw
	return m, nil
}

// ops are the operations' names, each one string for all.
var ops = func() map[string]string {
	ops := map[string]string{}
	for _, op := range []string{"PING", "PONG", "CONNECT", "PUB", "HPUB", "SUB", "UNSUB", "INFO", "MSG", "HMSG", "+OK", "-ERR"} {
		ops[op] = op
	}
	return ops
}()

// known reports whether op is one the peer may send.
func (r *reader) known(op string) bool {
	switch op {
	case "PING", "PONG":
		return true
	case "CONNECT", "PUB", "HPUB", "SUB", "UNSUB":
		return !r.server
	case "INFO", "MSG", "HMSG", "+OK", "-ERR":
		return r.server
	}
	return false
}

// parseArgs reads the control line's words as the operation takes them.
func (m *msg) parseArgs(maxPayload int) error {
	a := m.args
	var err error
	switch {
	case m.op == "PUB" && (len(a) == 2 || len(a) == 3):
		m.subject, m.reply = a[0], pick(a, 3, 1)
		m.size, err = parseSize(a[len(a)-1], maxPayload)
	case m.op == "HPUB" && (len(a) == 3 || len(a) == 4):
		m.subject, m.reply = a[0], pick(a, 4, 1)
		m.hdr, m.size, err = headerSizes(a[len(a)-2], a[len(a)-1], maxPayload)
	case m.op == "MSG" && (len(a) == 3 || len(a) == 4):
		m.subject, m.sid, m.reply = a[0], a[1], pick(a, 4, 2)
		m.size, err = parseSize(a[len(a)-1], maxPayload)
	case m.op == "HMSG" && (len(a) == 4 || len(a) == 5):
		m.subject, m.sid, m.reply = a[0], a[1], pick(a, 5, 2)
		m.hdr, m.size, err = headerSizes(a[len(a)-2], a[len(a)-1], maxPayload)
	case m.op == "SUB" && (len(a) == 2 || len(a) == 3):
		m.subject, m.sid = a[0], a[len(a)-1]
	case m.op == "UNSUB" && (len(a) == 1 || len(a) == 2):
		m.sid = a[0]
	case m.op == "PUB", m.op == "HPUB", m.op == "MSG", m.op == "HMSG", m.op == "SUB", m.op == "UNSUB":
		return errUnknownOp
	}
	return err
}

// appendFields appends the words of s, as strings.Fields splits them
// (the protocol's separators are spaces and tabs).
func appendFields(a []string, s string) []string {
	for {
		s = strings.TrimLeft(s, " \t\r\n\v\f")
		if s == "" {
			return a
		}
		i := strings.IndexAny(s, " \t\r\n\v\f")
		if i < 0 {
			return append(a, s)
		}
		a, s = append(a, s[:i]), s[i:]
	}
}

// pick is a[i] when the line has n words, else "".
func pick(a []string, n, i int) string {
	if len(a) == n {
		return a[i]
	}
	return ""
}

// parseSize reads a size as the server does: decimal digits only; one
// over maxPayload is the server's payload violation.
func parseSize(s string, maxPayload int) (int, error) {
	if s == "" {
		return 0, errUnknownOp
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, errUnknownOp
		}
		if n <= maxPayload { // past it the value no longer matters, and never overflows
			n = n*10 + int(c-'0')
		}
	}
	if n > maxPayload {
		return 0, errPayload
	}
	return n, nil
}

// headerSizes reads an HPUB's or HMSG's header and total sizes.
func headerSizes(h, t string, maxPayload int) (int, int, error) {
	hn, err := parseSize(h, maxPayload)
	if err != nil {
		return 0, 0, err
	}
	tn, err := parseSize(t, maxPayload)
	if err != nil {
		return 0, 0, err
	}
	if hn > tn {
		return 0, 0, errUnknownOp
	}
	return hn, tn, nil
}

// line reads a control line of at most maxLine bytes, without its
// line end (CRLF, or a bare LF as the server takes too).
func (r *reader) line() (string, error) {
	start := len(r.raw)
	for {
		b, err := r.r.ReadSlice('\n')
		if len(r.raw)-start+len(b) > r.maxLine+2 {
			return "", errControlLine
		}
		r.raw = append(r.raw, b...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF && len(r.raw) > start {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
	l := bytes.TrimSuffix(r.raw[start:len(r.raw)-1], []byte("\r"))
	if len(l) > r.maxLine {
		return "", errControlLine
	}
	return string(l), nil
}

// body reads a message's payload and the CRLF after it, a piece at a
// time: only what arrived is ever allocated.
func (r *reader) body(m *msg) error {
	if m.size < 0 {
		return nil
	}
	n, start := m.size, len(r.raw)
	for left := n + 2; left > 0; {
		k := min(left, bufSize)
		b, err := r.r.Peek(k)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		r.raw = append(r.raw, b...)
		r.r.Discard(k)
		left -= k
	}
	if !bytes.HasSuffix(r.raw, []byte("\r\n")) {
		return errUnknownOp
	}
	m.payload = r.raw[start : start+n]
	return nil
}

// Header is a message's NATS headers: each name with its values, in the
// order they came. Status and Description are the status line's (a
// server's "NATS/1.0 503" or "NATS/1.0 409 Consumer Deleted").
type Header struct {
	Status, Description string
	Fields              map[string][]string
}

// Get is the first value of a header, "" for none. Names match exactly,
// as nats.go's Header.Get does, then regardless of case.
func (h Header) Get(name string) string {
	if v := h.Fields[name]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h.Fields {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// parseHeader reads a header block: "NATS/1.0[ status[ description]]"
// then "Name: value" lines, then an empty line. A block that is not one
// is as good as none.
func parseHeader(b []byte) Header {
	var h Header
	if len(b) == 0 { // a PUB or MSG: no block to split
		return h
	}
	lines := strings.Split(string(b), "\r\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "NATS/1.0") {
		return h
	}
	status := strings.TrimSpace(lines[0][len("NATS/1.0"):])
	h.Status, h.Description, _ = strings.Cut(status, " ")
	h.Description = strings.TrimSpace(h.Description)
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok || k == "" {
			continue
		}
		if h.Fields == nil {
			h.Fields = map[string][]string{}
		}
		h.Fields[k] = append(h.Fields[k], strings.TrimSpace(v))
	}
	return h
}

// info is what the proxy reads of the server's INFO.
type info struct {
	tlsRequired bool
	headers     bool
	maxPayload  int64 // 0: not announced
}

// rewriteInfo points every address the server's INFO gives a client at
// the proxy, so that a client reconnecting (after a cut, in lame duck
// mode, to another node of a cluster) comes back through it: host and
// port, connect_urls (the cluster's other nodes) become the proxy's, and
// ws_connect_urls (websocket, which the proxy does not speak) go. It also
// drops tls_available: a client that insists on TLS cannot be proxied
// exactly, and learns so on connecting, as from a server without TLS.
// Every other field stays as the server sent it (reordered: JSON keys).
func rewriteInfo(js []byte, proxyAddr string) ([]byte, info, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(js, &f); err != nil {
		return nil, info{}, err
	}
	var in info
	_ = json.Unmarshal(f["tls_required"], &in.tlsRequired)
	_ = json.Unmarshal(f["headers"], &in.headers)
	_ = json.Unmarshal(f["max_payload"], &in.maxPayload)
	host, port, err := net.SplitHostPort(proxyAddr)
	if err != nil {
		return nil, in, err
	}
	f["host"], _ = json.Marshal(host)
	f["port"] = json.RawMessage(port)
	if _, ok := f["connect_urls"]; ok {
		f["connect_urls"], _ = json.Marshal([]string{proxyAddr})
	}
	delete(f, "ws_connect_urls")
	if !in.tlsRequired {
		delete(f, "tls_available")
	}
	out, err := json.Marshal(f)
	return out, in, err
}

// connectHeaders reads whether a client's CONNECT says it takes headers
// (HMSG): the proxy answers an injected failure in a header status only
// then. Nothing else of CONNECT is read or kept (it may carry a password,
// a token or a JWT).
func connectHeaders(js []byte) bool {
	var c struct {
		Headers bool `json:"headers"`
	}
	return json.Unmarshal(js, &c) == nil && c.Headers
}

// statusMsg is an HMSG carrying only a status, as the server sends one
// (a 503 for no responders, a 409 for a failed pull).
func statusMsg(subject, sid, status string) []byte {
	h := "NATS/1.0 " + oneLine(status) + "\r\n\r\n"
	return fmt.Appendf(nil, "HMSG %s %s %d %d\r\n%s\r\n", subject, sid, len(h), len(h), h)
}

// plainMsg is a MSG carrying data.
func plainMsg(subject, sid string, data []byte) []byte {
	b := fmt.Appendf(nil, "MSG %s %s %d\r\n", subject, sid, len(data))
	return append(append(b, data...), "\r\n"...)
}
