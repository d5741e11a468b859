// Package amqp is an AMQP 0-9-1 proxy (RabbitMQ's protocol) that strikes a
// fault at an exact boundary of a service's connection: a basic.publish
// before it reaches the broker or with its publisher confirm held, a
// delivery held before the consumer sees it, a basic.ack before it reaches
// the broker, a tx.commit or any other method. The service needs no code
// change: it connects to the proxy's address.
//
// The proxy reads frames (method, content header, body, heartbeat) within
// the frame-max the peers agreed on, and acts on whole messages: a method
// with its content header and body. When an answer is to be held (a
// confirm, a -ok), the proxy reads nothing more from that client until the
// fault has struck, so nothing the client sent after the method reaches
// the broker first.
//
// The proxy records what crossed it so that a drill can check the history
// the service itself produced: its publishes (with their confirms or
// transaction outcome), deliveries and acks, kept whole. Of anything else
// it keeps the method's name, for the first MaxOtherEvents of them, and
// never the arguments of connection.start-ok, secure-ok or update-secret
// (credentials).
//
// A client that speaks anything but AMQP 0-9-1 (TLS, AMQP 1.0) is relayed
// blindly, and every trigger waiting on the proxy fails as unclassifiable.
package amqp

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// Kind is what the proxy takes a method for.
type Kind int

const (
	KindOther    Kind = iota
	KindPublish       // basic.publish, with its message
	KindConfirm       // the server's basic.ack or basic.nack on a channel in confirm mode
	KindDelivery      // basic.deliver or basic.get-ok, with its message
	KindAck           // the client's basic.ack, basic.nack or basic.reject
	KindTx            // tx.select, tx.commit, tx.rollback and their -ok
	KindChannel       // channel.open, channel.close and their -ok
)

func (k Kind) String() string {
	return [...]string{"other", "publish", "confirm", "delivery", "ack", "tx", "channel"}[k]
}

// Event is one method the proxy relayed (with its message), or stopped
// for a fault.
type Event struct {
	Seq        int64 // the proxy's number for the event, from 1
	Conn       int
	Channel    uint16
	Method     string // basic.publish, basic.deliver, …
	FromServer bool
	Kind       Kind

	Exchange, RoutingKey, Queue, ConsumerTag string
	DeliveryTag                              uint64
	Multiple, Requeue, Redelivered           bool
	// NoAck: a delivery to a consumer (basic.consume) or a basic.get
	// that asked for no acks; RabbitMQ counts it acknowledged as it sends
	// it (https://www.rabbitmq.com/docs/confirms#acknowledgement-modes).
	NoAck bool
	// Tag is a publish's confirm number on its channel (0: the channel
	// was not in confirm mode); Tx says the channel was transactional.
	Tag uint64
	Tx  bool
	// ReplyCode and ReplyText are a close's or a return's.
	ReplyCode  uint16
	ReplyText  string
	Properties *Properties
	Body       []byte
	// Answers is, of a synchronous method's answer, the Seq of the method.
	Answers int64
	// Dropped: a fault kept the method from going on.
	Dropped bool
	Fault   string // the trigger that struck here, "" for none
	// Copy: the proxy's own second send of a publish, or second hand-out
	// of a delivery, a duplicate struck.
	Copy bool
	At   time.Time
}

// ReplyWait bounds how long a client waits, behind the barrier, for the
// held answer of its method. An answer that never comes (a confirm on a
// channel the broker stalls) fails the trigger as unclassifiable and the
// client goes on. The default of Limits.ReplyWait.
const ReplyWait = 10 * time.Second

// Proxy listens on a loopback port and relays each client connection to
// the upstream AMQP server.
type Proxy struct {
	upstream string
	ln       *listen.Listener
	seq      atomic.Int64
	others   atomic.Int64
	lim      Limits
	acct     *listen.Account // what clients' messages under way hold, all connections

	fault.Registry[*Armed, Event]
}

// Listen starts a proxy to upstream ("host:port") on 127.0.0.1, with
// DefaultLimits.
func Listen(upstream string) (*Proxy, error) { return ListenWith(upstream, DefaultLimits()) }

// ListenWith starts a proxy with limits of its own (a cap or wait left at
// 0 is its default).
func ListenWith(upstream string, lim Limits) (*Proxy, error) {
	listen.Default(&lim.ReplyWait, ReplyWait)
	listen.Default(&lim.MaxOtherEvents, MaxOtherEvents)
	p := &Proxy{upstream: upstream, lim: lim, acct: lim.Account()}
	p.Bound(lim.RecordBytes)
	ln, err := listen.Serve(listen.Protocol{
		Open:   func(id int, nc net.Conn) listen.Conn { return newConn(p, id, nc) },
		Serve:  func(c listen.Conn) { c.(*conn).serve() },
		Refuse: refuse,
	})
	if err != nil {
		return nil, fmt.Errorf("amqp proxy: %w", err)
	}
	p.ln = ln
	return p, nil
}

// refuse answers a client over the proxy's connection cap as RabbitMQ
// answers one over its connection_max: it reads the protocol header, then
// closes the connection with 530 NOT_ALLOWED before anything else.
func refuse(nc net.Conn, max int) {
	if _, err := io.ReadFull(nc, make([]byte, len(protocolHeader))); err != nil {
		return
	}
	text := fmt.Sprintf("NOT_ALLOWED - outboxdrill amqp proxy: too many client connections (cap %d)", max)
	_, _ = nc.Write(closeFrame(0, 530, text, methodID{}))
}

// Connections is how many client connections the proxy has taken so far.
func (p *Proxy) Connections() int { return p.ln.Accepted() }

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr() }

// Close stops listening, closes every relayed connection and waits.
func (p *Proxy) Close() error { return p.ln.Close() }

// Arm adds a trigger; it applies to every connection through this proxy.
func (p *Proxy) Arm(t Trigger) (*Armed, error) {
	c, err := t.Compile()
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
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
		return nil, fmt.Errorf("amqp: %w", err)
	}
	a := &Armed{Armed: fa, Trigger: t}
	p.Add(a)
	return a, nil
}

// strikeOn counts a crossing against the waiting triggers and returns the
// one to strike now, if any. A trigger filtered by queue fails on an ack
// whose delivery the proxy did not see: it cannot tell.
func (p *Proxy) strikeOn(x crossing) *Armed {
	for _, a := range p.Waiting() {
		if !a.Trigger.matches(x) {
			continue
		}
		if a.Trigger.Queue != "" && x.kind == KindAck && !x.queueKnown {
			a.Fail(&fault.Unclassifiable{Reason: fmt.Sprintf("a %s of a delivery the proxy did not see: its queue is unknown", x.method)})
			continue
		}
		if a.Take() {
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

// MaxOtherEvents bounds the events the proxy keeps of methods the history
// does not read; a trigger's strikes are always kept. The default of
// Limits.MaxOtherEvents.
const MaxOtherEvents = 1 << 16

// record numbers and keeps an event and returns its number (0: not kept).
func (p *Proxy) record(e Event) int64 {
	e.At = time.Now()
	if e.Kind == KindOther && p.others.Add(1) > p.lim.MaxOtherEvents && e.Fault == "" {
		return 0
	}
	e.Seq = p.seq.Add(1)
	p.Record(e)
	return e.Seq
}

// RecordSize is what the event keeps: its body and its properties, a
// headers table counted as decoded (fault.Sized).
func (e Event) RecordSize() (int, bool) {
	n := len(e.Body) + len(e.Exchange) + len(e.RoutingKey) + len(e.Queue) + len(e.ConsumerTag) + len(e.ReplyText)
	if p := e.Properties; p != nil {
		n += 160 + len(p.ContentType) + len(p.ContentEncoding) + len(p.CorrelationID) + len(p.ReplyTo) + len(p.Expiration) + len(p.MessageID) + len(p.Type) + len(p.UserID) + len(p.AppID)
		n += decodedSize(p.Headers)
	}
	return n, e.Fault != ""
}

// decodedSize is what a decoded field value holds in memory: an any is
// 16 bytes, a table entry a map slot besides.
func decodedSize(v any) int {
	switch t := v.(type) {
	case string:
		return 16 + len(t)
	case []byte:
		return 40 + len(t)
	case []any:
		n := 40
		for _, el := range t {
			n += decodedSize(el)
		}
		return n
	case map[string]any:
		n := 48
		for k, el := range t {
			n += 32 + len(k) + decodedSize(el)
		}
		return n
	}
	return 16
}
