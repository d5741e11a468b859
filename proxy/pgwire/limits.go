package pgwire

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
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
	// connection (Limits.Handshake): PostgreSQL's own
	// authentication_timeout default (1 min). A connection that idles
	// there would hold one of the proxy's slots.
	StartupTimeout = time.Minute
	// ConnBytes bounds what one connection makes the proxy hold, on its
	// account (Limits.ConnBytes): a message at MaxMessage with its copies
	// (messageCopies), inside a batch at MaxBatch, and the statements it
	// prepared besides.
	ConnBytes = (1+messageCopies)*MaxMessage + MaxBatch + 16<<20
	// TotalBytes bounds the same for all the proxy's connections: one at
	// its cap and the ordinary ones beside it (a service's queries are a
	// few kB). Past either cap a message is refused with 54000, a batch
	// goes on as after a Flush, prepared statements are forgotten.
	TotalBytes = ConnBytes + 64<<20
)

// messageCopies is what a client's message costs, besides its bytes as
// they arrived in the framer, once it is whole, in multiples of its size:
// pgproto3 copies it into its own buffer and decodes it, and the proxy
// encodes it again to forward it.
const messageCopies = 2

// Limits is what one proxy lets its clients cost (ListenWith gives each
// proxy its own; tests lower them on the proxy they build). Of the shared
// listen.Limits, Message is not used: the bytes of a message are counted
// as they arrive. The caps of PostgreSQL's own messages come besides; each
// left at 0 is its default (the constant of the same name), never "none".
type Limits struct {
	listen.Limits
	// MaxMessage bounds one protocol message, either way (MaxMessage).
	MaxMessage int
	// MaxHeldReply bounds what is held of one reply while a statement
	// trigger waits for it (MaxHeldReply).
	MaxHeldReply int
	// MaxBatch bounds an extended-protocol batch kept until its Sync
	// (MaxBatch).
	MaxBatch int
	// MaxPrepared bounds the bytes of prepared statements and portals
	// remembered for one connection (MaxPrepared).
	MaxPrepared int
}

// DefaultLimits are the limits Listen gives a proxy. Idle is none, as
// PostgreSQL's own idle_session_timeout (0): a pool keeps connections
// idle for as long as it likes (database/sql and node-postgres's pg.Pool
// can keep one for ever), and a proxy stricter than the server would cut
// a healthy service. A slot is bounded by MaxConns instead, and a client
// that never finishes its startup by Handshake.
func DefaultLimits() Limits {
	return Limits{
		Limits:     listen.Limits{ConnBytes: ConnBytes, TotalBytes: TotalBytes, Handshake: StartupTimeout, RecordBytes: fault.MaxRecordBytes},
		MaxMessage: MaxMessage, MaxHeldReply: MaxHeldReply, MaxBatch: MaxBatch, MaxPrepared: MaxPrepared,
	}
}

// orDefaults is l with each message cap left at 0 set to its default: a
// cap of 0 would refuse every message.
func (l Limits) orDefaults() Limits {
	listen.Default(&l.MaxMessage, MaxMessage)
	listen.Default(&l.MaxHeldReply, MaxHeldReply)
	listen.Default(&l.MaxBatch, MaxBatch)
	listen.Default(&l.MaxPrepared, MaxPrepared)
	return l
}

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

// tooLarge is a message over the cap, or over what the proxy's account
// has left (over: which cap).
type tooLarge struct {
	from string // "client" or "server"
	n    int
	cap  int // Limits.MaxMessage
	over error
}

func (e *tooLarge) Error() string {
	if e.over != nil {
		return listen.Named(e.over, fmt.Sprintf("a %s message of %d bytes", e.from, e.n)).Error()
	}
	return fmt.Sprintf("a %s message of %d bytes is over the proxy's cap of %d bytes", e.from, e.n, e.cap)
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
	tab     *listen.Tab // what the message being read holds of the account
	acct    *listen.ConnAccount
	max     int // Limits.MaxMessage
}

func newFramer(r io.Reader, max int) *framer {
	return &framer{r: bufio.NewReaderSize(r, 8<<10), startup: true, max: max}
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

// handled says the message read last was handled: what the proxy keeps
// of it is on the account apart (a batch), its copies are garbage.
func (f *framer) handled() { f.tab.Done() }

// fill reads the next message whole.
func (f *framer) fill() error {
	if cap(f.msg) > 64<<10 {
		f.msg = nil // let a large message's buffer go
	}
	head := 5
	if f.startup {
		head = 4
	}
	f.tab.Done() // the last message went on: its copies are gone
	f.tab = f.acct.Tab()
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
	case !f.startup && n-4 > f.max:
		return &tooLarge{from: "client", n: n - 4, cap: f.max}
	}
	for left := n - 4; left > 0; {
		k := min(left, 64<<10)
		if err := f.tab.Take(int64(k)); err != nil { // before it is allocated
			return &tooLarge{from: "client", n: n - 4, cap: f.max, over: err}
		}
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
	if err := f.tab.Take(messageCopies * int64(n-4)); err != nil {
		return &tooLarge{from: "client", n: n - 4, cap: f.max, over: err}
	}
	if f.startup {
		if code := binary.BigEndian.Uint32(f.msg[4:8]); code != sslRequestCode && code != gssEncCode {
			f.startup = false
		}
	}
	return nil
}

// track keeps the proxy's memory of a connection's prepared statements
// and portals, in bytes, up to Limits.MaxPrepared and on the account; past
// either, they are all forgotten.
func (c *conn) track(m map[string]string, name, sql string) {
	if c.forgot {
		return
	}
	grow := len(name) + len(sql)
	if old, ok := m[name]; ok {
		grow -= len(name) + len(old)
	}
	if c.tracked+grow > c.p.lim.MaxPrepared || c.acct.Take(int64(grow)) != nil {
		c.forgot = true
		c.acct.Release(int64(c.tracked))
		c.tracked = 0
		clear(c.stmts)
		clear(c.portals)
		return
	}
	c.acct.Release(int64(-grow)) // a shorter statement replaced a longer one
	c.tracked += grow
	m[name] = sql
}

func (c *conn) untrack(m map[string]string, name string) {
	if old, ok := m[name]; ok && !c.forgot {
		c.tracked -= len(name) + len(old)
		c.acct.Release(int64(len(name) + len(old)))
		delete(m, name)
	}
}

// settleBatch keeps the account in step with the extended-protocol batch
// kept until its Sync: what it grew by is taken (past the caps, the batch
// goes on to the server as after a Flush, and cannot be struck), what
// was sent is given back.
func (c *conn) settleBatch() bool {
	n := int64(len(c.batch))
	if n <= c.batchHeld {
		c.acct.Release(c.batchHeld - n)
		c.batchHeld = n
		return true
	}
	if err := c.acct.Take(n - c.batchHeld); err != nil {
		ok := c.flushed(c.batch, "past the proxy's memory cap ("+err.Error()+")")
		c.acct.Release(c.batchHeld)
		c.batchHeld = 0
		return ok
	}
	c.batchHeld = n
	return true
}
