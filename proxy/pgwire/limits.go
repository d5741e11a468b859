package pgwire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/outboxdrill/runner/proxy/listen"
)

// The proxy's limits. docs/drill-your-own-service.md ("Limits") says why
// each.
const (
	// MaxMessage bounds one protocol message, either way. PostgreSQL takes
	// a client message of up to 1 GB (PQ_LARGE_MESSAGE_LIMIT) and sends
	// rows as wide; the proxy decodes each message whole, so it refuses one
	// of more than 64 MB: a client's with SQLSTATE 54000
	// (program_limit_exceeded), then closes; a server's likewise.
	MaxMessage = 64 << 20
	// MaxHeldReply bounds what the proxy holds of one reply while a
	// statement trigger waits for it. A larger reply goes on to the client
	// as it comes; a trigger it would have matched fails as unclassifiable.
	MaxHeldReply = 64 << 20
	// MaxBatch bounds an extended-protocol batch kept until its Sync. A
	// larger one goes on to the server as it comes, as after a Flush: a
	// trigger on it fails as unclassifiable.
	MaxBatch = 64 << 20
	// MaxPrepared bounds the bytes of prepared statements and portals
	// (names and SQL) the proxy remembers for one connection, to know what
	// an Execute runs. Past it, the proxy forgets them: every trigger that
	// waits on that connection's batches fails as unclassifiable.
	MaxPrepared = 64 << 20
	// StartupTimeout bounds the startup and authentication of a client
	// connection: PostgreSQL's own authentication_timeout default (1 min).
	// A connection that idles there would hold one of the proxy's slots.
	StartupTimeout = time.Minute
)

// The limits as the code reads them: tests lower them.
var (
	maxMessage   = MaxMessage
	maxHeldReply = MaxHeldReply
	maxBatch     = MaxBatch
	maxPrepared  = MaxPrepared
)

// limitSQLState is program_limit_exceeded.
const limitSQLState = "54000"

// maxStartup is PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
const maxStartup = 10000

// Startup request codes (pgproto3 keeps its own unexported).
const (
	sslRequestCode = 80877103
	gssEncCode     = 80877104
)

// size says n bytes for a message.
func size(n int) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// tooLarge is a message over the cap, or over what the proxy's budget for
// large messages has left (budget).
type tooLarge struct {
	from   string // "client" or "server"
	n      int
	budget bool
}

func (e *tooLarge) Error() string {
	if e.budget {
		return listen.ErrBudget(int64(e.n)).Error()
	}
	return fmt.Sprintf("a %s message of %d bytes is over the proxy's cap of %d bytes", e.from, e.n, maxMessage)
}

// framer reads the client's messages whole, a piece at a time as their
// bytes arrive, before pgproto3's Backend sees them. The Backend allocates
// the length a message announces before its first byte comes (a header
// claiming 2^31-1 bytes cost 2 GB); behind the framer, memory follows what
// arrived, and a length over the cap is refused before anything is read.
type framer struct {
	r       *bufio.Reader
	startup bool // startup framing (no type byte) until the StartupMessage
	msg     []byte
	off     int
	hold    *listen.Hold // the client's share of the proxy's large-message budget
}

func newFramer(r io.Reader) *framer {
	return &framer{r: bufio.NewReaderSize(r, 8<<10), startup: true}
}

func (f *framer) Read(p []byte) (int, error) {
	if f.off == len(f.msg) {
		if err := f.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, f.msg[f.off:])
	f.off += n
	return n, nil
}

// fill reads the next message whole.
func (f *framer) fill() error {
	if cap(f.msg) > 64<<10 {
		f.msg = nil // let a large message's buffer go
	}
	head := 5
	if f.startup {
		head = 4
	}
	f.hold.Release() // the last message went on
	f.msg, f.off = slices.Grow(f.msg[:0], head)[:head], 0
	if _, err := io.ReadFull(f.r, f.msg); err != nil {
		f.msg = f.msg[:0]
		return err
	}
	n := int(int32(binary.BigEndian.Uint32(f.msg[head-4:])))
	switch {
	case f.startup && (n-4 < 4 || n-4 > maxStartup):
		return fmt.Errorf("invalid length of startup packet: %d", n-4)
	case !f.startup && n < 4:
		return fmt.Errorf("invalid message length: %d", n)
	case !f.startup && n-4 > maxMessage:
		return &tooLarge{from: "client", n: n - 4}
	case !f.hold.Add(int64(n - 4)):
		return &tooLarge{from: "client", n: n - 4, budget: true}
	}
	for left := n - 4; left > 0; {
		k := min(left, 64<<10)
		f.msg = slices.Grow(f.msg, k)
		got, err := io.ReadFull(f.r, f.msg[len(f.msg):len(f.msg)+k])
		f.msg = f.msg[:len(f.msg)+got]
		if err != nil {
			f.msg = f.msg[:0]
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		left -= k
	}
	if f.startup {
		if code := binary.BigEndian.Uint32(f.msg[4:8]); code != sslRequestCode && code != gssEncCode {
			f.startup = false
		}
	}
	return nil
}

// tracked is the proxy's memory of a connection's prepared statements
// and portals, in bytes, up to maxPrepared.
func (c *conn) track(m map[string]string, name, sql string) {
	if c.forgot {
		return
	}
	if old, ok := m[name]; ok {
		c.tracked -= len(name) + len(old)
	}
	c.tracked += len(name) + len(sql)
	if c.tracked > maxPrepared {
		c.forgot = true
		clear(c.stmts)
		clear(c.portals)
		return
	}
	m[name] = sql
}

func (c *conn) untrack(m map[string]string, name string) {
	if old, ok := m[name]; ok && !c.forgot {
		c.tracked -= len(name) + len(old)
		delete(m, name)
	}
}
