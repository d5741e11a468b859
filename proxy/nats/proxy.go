// Package nats is a NATS client-protocol proxy that strikes a fault at an
// exact JetStream boundary of a service's connection: a publish before it
// reaches the server or with its PubAck held, a pull request, a delivery
// held before the consumer sees it, an ack before it reaches the server.
// The service needs no code change: it connects to the proxy's address.
//
// The server's INFO is rewritten so that a client reconnects to the proxy,
// never around it: host, port and connect_urls (a cluster's other nodes)
// name the proxy. A proxy serves one upstream server.
//
// When a publish's PubAck is to be held, the proxy reads nothing more from
// that client until the fault has struck (or the reply fails to come in
// ReplyWait), so nothing the client sent after the publish reaches the
// server first.
//
// The proxy records what crossed it so that a drill can check the history
// the service itself produced: its publishes (with their PubAcks),
// deliveries and acks, kept whole. Of anything else it keeps the
// operation's name and subject, for the first MaxOtherEvents of them, and
// never CONNECT's fields (a password, a token, a JWT).
//
// A connection that turns to TLS is relayed blindly, and every trigger
// waiting on the proxy fails as unclassifiable: nothing is approximated.
package nats

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// Kind is what the proxy takes an operation for.
type Kind int

const (
	KindOther    Kind = iota
	KindPublish       // a JetStream publish (OpPublish)
	KindPull          // a pull request
	KindAck           // a PUB to a $JS.ACK subject
	KindDelivery      // a MSG or HMSG with a $JS.ACK reply subject
	KindReply         // a MSG or HMSG answering a client's PUB the proxy tracks
)

func (k Kind) String() string {
	return [...]string{"other", "publish", "pull", "ack", "delivery", "reply"}[k]
}

// Event is one operation the proxy relayed, or stopped for a fault.
type Event struct {
	Seq  int64 // the proxy's number for the event, from 1
	Conn int
	Kind Kind
	Op   string // as on the wire: PUB, HPUB, MSG, HMSG, SUB, CONNECT, …
	// Subject and Reply are the operation's; SID a MSG's or SUB's.
	Subject, Reply, SID string
	// Header and Data are a message's (kept for the kinds the history
	// reads; of others nothing).
	Header Header
	Data   []byte
	// Answers is, of a KindReply, the Seq of the client's PUB it answers.
	Answers int64
	// Dropped: a fault kept the operation from going on (to the server,
	// or to the client for a delivery).
	Dropped bool
	Fault   string // the trigger that struck here, "" for none
	// Copy: the proxy's own second send of a publish, or second hand-out
	// of a delivery, a duplicate struck (the service sent, or the server
	// handed out, one).
	Copy bool
	At   time.Time
}

// ReplyWait bounds how long a client waits, behind the barrier, for the
// held reply of its publish. A reply that never comes on this connection
// (a plain request nobody answers) fails the trigger as unclassifiable
// and the client goes on. nats.go gives up on a PubAck after 5 s. The
// default of Limits.ReplyWait.
const ReplyWait = 10 * time.Second

// Proxy listens on a loopback port and relays each client connection to
// the upstream NATS server.
type Proxy struct {
	upstream string
	ln       *listen.Listener
	seq      atomic.Int64
	others   atomic.Int64 // events of kinds the history does not read
	unpaired atomic.Int64
	lim      Limits
	acct     *listen.Account // what the proxy remembers of its connections
	// consumers are the JetStream consumers' configurations the server
	// stated in its replies (Consumers).
	consumers consumers
	// idle is what its clients hold and asked for (IdlePoll).
	idle idleBook

	fault.Registry[*Armed, Event]
}

// Listen starts a proxy to upstream ("host:port") on 127.0.0.1, with
// DefaultLimits.
func Listen(upstream string) (*Proxy, error) { return ListenWith(upstream, DefaultLimits()) }

// ListenWith starts a proxy with limits of its own (ReplyWait and
// MaxOtherEvents left at 0 are their defaults).
func ListenWith(upstream string, lim Limits) (*Proxy, error) {
	listen.Default(&lim.ReplyWait, ReplyWait)
	listen.Default(&lim.MaxOtherEvents, MaxOtherEvents)
	p := &Proxy{upstream: upstream, lim: lim, acct: lim.Account()}
	p.idle.acct = p.acct.Conn() // the idle book's share, as a connection's
	p.Bound(lim.RecordBytes)
	ln, err := listen.Serve(listen.Protocol{
		Open:   func(id int, nc net.Conn) listen.Conn { return newConn(p, id, nc) },
		Serve:  func(c listen.Conn) { c.(*conn).serve() },
		Refuse: refuse,
	})
	if err != nil {
		return nil, fmt.Errorf("nats proxy: %w", err)
	}
	p.ln = ln
	return p, nil
}

// refuse answers a client over the proxy's connection cap as nats-server
// answers one over its max_connections.
func refuse(nc net.Conn, _ int) { _, _ = nc.Write([]byte("-ERR 'maximum connections exceeded'\r\n")) }

// Connections is how many client connections the proxy has taken so far.
func (p *Proxy) Connections() int { return p.ln.Accepted() }

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr() }

// Close stops listening, closes every relayed connection and waits.
func (p *Proxy) Close() error { return p.ln.Close() }

// Unpaired is how many replies the proxy passed on without pairing them
// with the publish they answer, past MaxPending: publishes the history
// lacks.
func (p *Proxy) Unpaired() int64 { return p.unpaired.Load() }

// Arm adds a trigger; it applies to every connection through this proxy.
func (p *Proxy) Arm(t Trigger) (*Armed, error) {
	c, err := t.Compile()
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	return p.ArmChecked(c, t.Kill)
}

// ArmChecked arms a compiled trigger as it is, kill the function its
// Kill calls.
func (p *Proxy) ArmChecked(c Checked, kill func() error) (*Armed, error) {
	t := c.t
	t.Kill = kill
	fa, err := fault.NewArmed(t.Action, t.Nth)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	a := &Armed{Armed: fa, Trigger: t}
	p.Add(a)
	return a, nil
}

// strikeOn counts a crossing against the waiting triggers and returns the
// one to strike now, if any.
func (p *Proxy) strikeOn(x crossing) *Armed {
	for _, a := range p.Waiting() {
		if a.Trigger.matches(x) && a.Take() {
			return a
		}
	}
	return nil
}

// failAll fails every waiting trigger.
func (p *Proxy) failAll(err error) {
	for _, a := range p.Waiting() {
		a.Fail(err)
	}
}

// MaxOtherEvents bounds the events the proxy keeps of operations the
// history does not read (a client in a loop would otherwise grow the
// record without bound); a trigger's strikes are always kept. The
// default of Limits.MaxOtherEvents.
const MaxOtherEvents = 1 << 16

// record numbers and keeps an event, and returns its number (0: not
// kept). The message's bytes are copied: they are the reader's buffer.
func (p *Proxy) record(e Event, m *msg) int64 {
	e.At = time.Now()
	if e.Kind == KindOther && p.others.Add(1) > p.lim.MaxOtherEvents && e.Fault == "" {
		return 0
	}
	switch {
	case m == nil:
	case e.Kind == KindOther:
		// Clones: the event must not keep a long control line alive;
		// of its subject it keeps 256 bytes.
		e.Op, e.Reply, e.SID = m.op, strings.Clone(m.reply), strings.Clone(m.sid)
		e.Subject = strings.Clone(m.subject[:min(len(m.subject), 256)])
	default:
		e.Op = m.op
		e.Subject, e.Reply, e.SID = clone3(m.subject, m.reply, m.sid)
		e.Header = parseHeader(m.header())
		e.Data = append([]byte(nil), m.data()...)
	}
	e.Seq = p.seq.Add(1)
	p.Record(e)
	return e.Seq
}

// clone3 copies three strings in one allocation (the copies of an
// event's subject, reply and sid live and die together).
func clone3(a, b, c string) (string, string, string) {
	var sb strings.Builder
	sb.Grow(len(a) + len(b) + len(c))
	sb.WriteString(a)
	sb.WriteString(b)
	sb.WriteString(c)
	all := sb.String()
	return all[:len(a)], all[len(a) : len(a)+len(b)], all[len(a)+len(b):]
}

// systemPrefixes begin the subjects of the server's own APIs and of
// replies: a PUB to one is no publish to a stream.
var systemPrefixes = []string{"$JS.", "$SYS.", "$JSC.", "$NRG.", "$SRV.", "_INBOX."}

// classify says what a client's PUB or HPUB is.
func classify(m *msg) crossing {
	x := crossing{subject: m.subject}
	switch {
	case strings.HasPrefix(m.subject, "$JS.ACK."):
		x.kind, x.ack = KindAck, ackKind(m.data())
	case strings.HasPrefix(m.subject, "$JS.API.CONSUMER.MSG.NEXT."):
		x.kind = KindPull
	case m.reply != "" && !hasAnyPrefix(m.subject, systemPrefixes):
		x.kind = KindPublish
	}
	return x
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ackKind reads an ack's payload as the server does: empty, +ACK or +OK
// acknowledge; +NXT acknowledges and asks for more; -NAK (with an
// optional delay), +WPI and +TERM (with an optional reason). Anything else
// the server ignores: "".
func ackKind(data []byte) string {
	s := string(data)
	switch {
	case s == "" || s == OpAckAck || s == "+OK":
		return OpAckAck
	case s == OpAckWPI:
		return OpAckWPI
	}
	for _, k := range []string{OpAckNext, OpAckNak, OpAckTerm} {
		if strings.HasPrefix(s, k) {
			return k
		}
	}
	return ""
}

// RecordSize is what the event keeps: its data and its header's fields
// as they sit in memory (fault.Sized).
func (e Event) RecordSize() (int, bool) {
	n := len(e.Data) + len(e.Subject) + len(e.Reply) + len(e.SID) + len(e.Header.Status) + len(e.Header.Description)
	for k, vs := range e.Header.Fields {
		n += 64 + len(k)
		for _, v := range vs {
			n += 16 + len(v)
		}
	}
	return n, e.Fault != ""
}
