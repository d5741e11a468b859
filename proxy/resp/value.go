package resp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Value is one RESP2 or RESP3 value, as read off the wire.
type Value struct {
	Type  byte    // the RESP type byte: + - : $ * % ~ > _ , # ! = (
	Str   string  // a string's, error's or number's text
	Null  bool    // a null bulk string or array, or RESP3 _
	Elems []Value // an array's, set's or push's elements; a map's keys and values in turn
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

// maxBulk bounds one bulk string (Redis's own proto-max-bulk-len default).
const maxBulk = 512 << 20

// reader reads values and keeps the bytes each one was made of, so that
// the proxy forwards exactly what it read.
type reader struct {
	r   *bufio.Reader
	raw []byte
}

func newReader(r io.Reader) *reader { return &reader{r: bufio.NewReaderSize(r, 64<<10)} }

// buffered reports whether more bytes are already read ahead.
func (r *reader) buffered() bool { return r.r.Buffered() > 0 }

// next reads one value; raw is valid until the next call.
func (r *reader) next() (Value, []byte, error) {
	r.raw = r.raw[:0]
	v, err := r.value()
	return v, r.raw, err
}

// command reads one client command: an array of bulk strings, or an
// inline command (a line of words, as redis-cli and telnet send).
func (r *reader) command() ([]string, []byte, error) {
	r.raw = r.raw[:0]
	b, err := r.r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if b[0] != '*' {
		line, err := r.line()
		if err != nil {
			return nil, nil, err
		}
		return strings.Fields(string(line)), r.raw, nil
	}
	v, err := r.value()
	if err != nil {
		return nil, nil, err
	}
	return v.Strings(), r.raw, nil
}

// line reads up to CRLF and returns the line without it.
func (r *reader) line() ([]byte, error) {
	b, err := r.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		var long []byte
		long, err = r.r.ReadBytes('\n')
		b = append(b[:len(b):len(b)], long...)
	}
	if err != nil {
		return nil, err
	}
	r.raw = append(r.raw, b...)
	return bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r")), nil
}

func (r *reader) value() (Value, error) {
	line, err := r.line()
	if err != nil {
		return Value{}, err
	}
	if len(line) == 0 {
		return Value{}, fmt.Errorf("resp: empty line")
	}
	v := Value{Type: line[0]}
	body := string(line[1:])
	switch v.Type {
	case '+', '-', ':', ',', '#', '(':
		v.Str = body
	case '_':
		v.Null = true
	case '$', '!', '=':
		n, err := length(body)
		if err != nil || n < 0 {
			v.Null = true
			return v, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r.r, buf); err != nil {
			return v, err
		}
		r.raw = append(r.raw, buf...)
		v.Str = string(buf[:n])
	case '*', '~', '>', '%', '|':
		n, err := length(body)
		if err != nil || n < 0 {
			v.Null = true
			return v, err
		}
		if v.Type == '%' || v.Type == '|' {
			n *= 2
		}
		v.Elems = make([]Value, 0, min(n, 1024))
		for range n {
			e, err := r.value()
			if err != nil {
				return v, err
			}
			v.Elems = append(v.Elems, e)
		}
		if v.Type == '|' { // an attribute comes before the value it annotates
			return r.value()
		}
	default:
		return v, fmt.Errorf("resp: unknown type byte %q", v.Type)
	}
	return v, nil
}

func length(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("resp: bad length %q", s)
	}
	if n > maxBulk {
		return 0, fmt.Errorf("resp: length %d over %d", n, maxBulk)
	}
	return n, nil
}
