package pgwire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// recorder keeps the bytes read through it.
type recorder struct {
	r   io.Reader
	got []byte
}

func (c *recorder) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.got = append(c.got, p[:n]...)
	return n, err
}

// FuzzPGWireClient reads arbitrary client bytes the way a proxied
// connection does, without a network: the framer, pgproto3's Backend (the
// startup phase, then messages), and the proxy's own reading of what they
// carry (a simple query's statements, COMMIT detection). Never a panic;
// the framer hands the Backend only whole messages within the cap, of the
// input's bytes, and keeps no more than it was sent.
func FuzzPGWireClient(f *testing.F) {
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": "u", "database": "d"}}).Encode(nil)
	ssl, _ := (&pgproto3.SSLRequest{}).Encode(nil)
	cancel, _ := (&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}}).Encode(nil)
	var msgs []byte
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Query{String: "BEGIN; INSERT INTO t VALUES ('a;b', $$x;y$$) -- c;\n; COMMIT"},
		&pgproto3.Parse{Name: "s", Query: "END WORK"},
		&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("1"), nil}},
		&pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{MaxRows: 1},
		&pgproto3.Close{ObjectType: 'S', Name: "s"},
		&pgproto3.Flush{},
		&pgproto3.Sync{},
		&pgproto3.CopyData{Data: []byte("1\t2\n")},
		&pgproto3.CopyDone{},
		&pgproto3.FunctionCall{Function: 1, Arguments: [][]byte{[]byte("x")}},
		&pgproto3.Terminate{},
	} {
		msgs, _ = m.Encode(msgs)
	}
	f.Add(append(append([]byte{}, startup...), msgs...))
	f.Add(append(append([]byte{}, ssl...), startup...))
	f.Add(cancel)
	f.Add(append(append([]byte{}, startup...), 'Q', 0x7f, 0xff, 0xff, 0xff))
	f.Add(append(append([]byte{}, startup...), 'Q', 0, 0, 0, 3))
	f.Fuzz(func(t *testing.T, in []byte) {
		const maxMessage = 4096
		fr := newFramer(bytes.NewReader(in), maxMessage)
		seen := &recorder{r: fr} // what the Backend got from the framer
		be := pgproto3.NewBackend(seen, io.Discard)
		be.SetMaxBodyLen(maxMessage)
		check := func() {
			t.Helper()
			if !bytes.HasPrefix(in, seen.got) {
				t.Fatalf("the framer passed on %q, not the input's %q", seen.got, in)
			}
			if cap(fr.msg) > 2*(maxMessage+5)+64<<10 {
				t.Fatalf("the framer kept %d bytes for a cap of %d", cap(fr.msg), maxMessage)
			}
		}
		for {
			msg, err := be.ReceiveStartupMessage()
			check()
			if err != nil {
				return
			}
			if _, ok := msg.(*pgproto3.StartupMessage); ok {
				break
			}
			if _, ok := msg.(*pgproto3.CancelRequest); ok {
				return
			}
		}
		for {
			msg, err := be.Receive()
			check()
			if err != nil {
				var tl *tooLarge
				if errors.As(err, &tl) && tl.n <= maxMessage {
					t.Fatalf("refused %d bytes, under the cap", tl.n)
				}
				return
			}
			b, err := msg.Encode(nil)
			if err != nil {
				continue
			}
			if len(b) > maxMessage+5 {
				t.Fatalf("a message of %d bytes passed the cap", len(b))
			}
			if q, ok := msg.(*pgproto3.Query); ok {
				for _, s := range statements(q.String) {
					if strings.TrimSpace(s) != s || s == "" || !strings.Contains(q.String, s) {
						t.Fatalf("statement %q of %q", s, q.String)
					}
					isCommit(s)
					isBegin(s)
					outsideTx(s)
				}
			}
			if p, ok := msg.(*pgproto3.Parse); ok {
				isCommit(p.Query)
			}
		}
	})
}
