package resp

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var respSeeds = []string{
	"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
	"PING  x\r\n\r\n",
	"*0\r\n*-1\r\n",
	"*1\r\n*1\r\n*1\r\n",
	"*1\r\n$-1\r\n",
	"*3\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n0\r\n",
	"|1\r\n+ttl\r\n:3\r\n%1\r\n+a\r\n~2\r\n:1\r\n,1.5\r\n",
	"_\r\n$-1\r\n=7\r\ntxt:abc\r\n>2\r\n+message\r\n#t\r\n",
	"*2\r\n*2\r\n$2\r\nid\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:1\r\n",
	"|0\r\n:1\r\n",
	"-ERR x\r\n(12345678901234567890\r\n!3\r\nerr\r\n",
	"$99999999999\r\n",
	"%2\r\n$1\r\na\r\n*-1\r\n$1\r\nb\r\n*0\r\n",
}

// FuzzRESPCommand reads arbitrary client bytes as commands, with small
// limits so that the fuzzer reaches them: never a panic; each command's
// bytes are the input's, in order, and within the cap; a refusal is one
// well-formed -ERR line.
func FuzzRESPCommand(f *testing.F) {
	for _, s := range respSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newReader(bytes.NewReader(in))
		r.maxBuf, r.maxLine, r.maxArgs = 256, 32, 8
		var consumed []byte
		for {
			cmd, raw, err := r.command()
			if err != nil {
				if pe, ok := isProto(err); ok {
					line := string(pe.reply())
					if !strings.HasPrefix(line, "-ERR ") || strings.IndexAny(line[:len(line)-2], "\r\n") >= 0 || !strings.HasSuffix(line, "\r\n") {
						t.Fatalf("refusal %q is not one -ERR line", line)
					}
				}
				return
			}
			if len(raw) == 0 {
				t.Fatal("a command of no bytes")
			}
			if len(raw) > r.maxBuf+r.maxLine+2 || len(cmd) > r.maxArgs && in[len(consumed)] == '*' {
				t.Fatalf("a command over the limits: %d bytes, %d args", len(raw), len(cmd))
			}
			consumed = append(consumed, raw...)
			if !bytes.HasPrefix(in, consumed) {
				t.Fatalf("forwarded bytes %q are not the input's %q", consumed, in)
			}
		}
	})
}

// FuzzRESPReply reads arbitrary server bytes as replies, once with a tiny
// buffer (so most replies stream) and once with a large one: never a
// panic; the same values are found at the same places either way; what is
// forwarded is the input, in order; a kept reply reads back the same.
func FuzzRESPReply(f *testing.F) {
	for _, s := range respSeeds {
		f.Add([]byte(s))
	}
	type step struct {
		n        int // bytes the value took
		err      bool
		streamed bool
	}
	read := func(t *testing.T, in []byte, buf int) []step {
		var streamed []byte
		r := newReplyReader(bytes.NewReader(in), func(b []byte) error { streamed = append(streamed, b...); return nil })
		r.maxBuf, r.maxDepth = buf, 16
		var consumed []byte
		var steps []step
		for {
			v, raw, err := r.next()
			if err != nil {
				return append(steps, step{err: true})
			}
			if v.Streamed {
				raw, streamed = streamed, nil
			} else if len(streamed) > 0 {
				t.Fatalf("%d bytes streamed for a reply kept whole", len(streamed))
			}
			if len(raw) == 0 {
				t.Fatal("a reply of no bytes")
			}
			if !v.Streamed && len(raw) > buf {
				t.Fatalf("kept %d bytes, over the buffer of %d", len(raw), buf)
			}
			consumed = append(consumed, raw...)
			if !bytes.HasPrefix(in, consumed) {
				t.Fatalf("forwarded bytes %q are not the input's %q", consumed, in)
			}
			if !v.Streamed {
				again, raw2, err := newReplyReader(bytes.NewReader(raw), nil).next()
				if err != nil || !bytes.Equal(raw2, raw) || !cmp.Equal(again, v) {
					t.Fatalf("%q read back as %v %v, was %v", raw, again, err, v)
				}
			}
			steps = append(steps, step{n: len(raw), streamed: v.Streamed})
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		small, large := read(t, in, 24), read(t, in, 1<<20)
		if len(small) != len(large) {
			t.Fatalf("%d values streaming, %d kept", len(small), len(large))
		}
		for i := range small {
			if small[i].n != large[i].n || small[i].err != large[i].err || large[i].streamed {
				t.Fatalf("value %d: %+v streaming, %+v kept", i, small[i], large[i])
			}
		}
	})
}
