// Package kafka is a Kafka protocol proxy that strikes a fault at an exact
// boundary of a service's connections: a Produce before it reaches the
// broker or with its response held, a Fetch, a delivery, an offset commit,
// an EndTxn, a group or share-group request. The service needs no code
// change: it bootstraps from the proxy's address.
//
// Every broker address a client learns (Metadata, FindCoordinator,
// DescribeCluster, DescribeQuorum, and the leader endpoints of Produce,
// Fetch, ShareFetch and ShareAcknowledge responses) is rewritten to a proxy
// listener, one per upstream broker, so that a client never reaches the
// cluster around the proxy. Responses are decoded with franz-go's kmsg by
// the key and version of the request they answer (paired in order: Kafka
// answers a connection's requests in the order they came); the requests
// the proxy reads are read by hand, within bounds.
//
// When a response is to be held, the proxy reads nothing more from that
// client until the fault has struck; a request fault strikes once the
// responses to what the client sent before have reached it.
//
// The proxy records what crossed it so that a drill can check the history
// the service produced: its produced records (with their offsets),
// deliveries (Fetch, ShareFetch), offset commits and share
// acknowledgements, transactions' ends. Of other requests it keeps the
// API's name, for the first MaxOtherEvents of them. SASL passes through
// unread; a connection that turns to TLS (or anything but Kafka's framing)
// fails every waiting trigger as unclassifiable.
package kafka

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// ReplyWait bounds how long a client waits, behind the barrier, for the
// held response (or the responses before a request fault). One that does
// not come in time fails the trigger as unclassifiable. The default of
// Limits.ReplyWait.
const ReplyWait = 30 * time.Second

// Proxy relays a Kafka cluster: a listener for the bootstrap broker, and
// one for each broker a response names.
type Proxy struct {
	seed string

	mu        sync.Mutex
	listeners map[string]*listen.Listener // by upstream address
	order     []string                    // upstream addresses, seed first
	closed    bool
	topicIDs  map[[16]byte]string
	txns      map[string]*txn // by transactional id
	groups    groups          // the timeouts JoinGroups announced

	conns, seq, others atomic.Int64
	limits             Limits
	acct               *listen.Account // every byte the connections hold, all of them

	fault.Registry[*Armed, Event]
}

// Listen starts a proxy to the bootstrap broker upstream ("host:port") on
// 127.0.0.1, with DefaultLimits; a listener for each other broker starts
// as a response names it.
func Listen(upstream string) (*Proxy, error) { return ListenWith(upstream, DefaultLimits()) }

// ListenWith is Listen with limits of the proxy's own (a test lowers
// them; ReplyWait and MaxOtherEvents left at 0 are their defaults).
func ListenWith(upstream string, lim Limits) (*Proxy, error) {
	listen.Default(&lim.ReplyWait, ReplyWait)
	listen.Default(&lim.MaxOtherEvents, MaxOtherEvents)
	p := &Proxy{seed: upstream, listeners: map[string]*listen.Listener{}, topicIDs: map[[16]byte]string{}, txns: map[string]*txn{},
		limits: lim, acct: lim.Account()}
	p.Bound(lim.RecordBytes)
	if _, err := p.listenerFor(upstream); err != nil {
		return nil, fmt.Errorf("kafka proxy: %w", err)
	}
	return p, nil
}

// Held is what the proxy's connections hold now, in bytes, as its account
// counts them.
func (p *Proxy) Held() int64 { return p.acct.Used() }

// refuse leaves a client over the proxy's connection cap as a broker over
// its max.connections leaves one: the connection closes, without a word
// (Kafka has none for it).
func refuse(net.Conn, int) {}

// listenerFor is the proxy's address for an upstream broker, started on
// first use.
func (p *Proxy) listenerFor(upstream string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ln := p.listeners[upstream]; ln != nil {
		return ln.Addr(), nil
	}
	if p.closed {
		return "", net.ErrClosed
	}
	ln, err := listen.Serve(listen.Protocol{
		Open: func(_ int, nc net.Conn) listen.Conn {
			return newConn(p, int(p.conns.Add(1)), upstream, nc)
		},
		Serve:  func(c listen.Conn) { c.(*conn).serve() },
		Refuse: refuse,
	})
	if err != nil {
		return "", err
	}
	p.listeners[upstream] = ln
	p.order = append(p.order, upstream)
	return ln.Addr(), nil
}

// Addr is the bootstrap listener's "host:port": what the service is given.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.listeners[p.seed].Addr()
}

// Brokers maps each upstream broker the proxy relays to its listener.
func (p *Proxy) Brokers() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]string{}
	for up, ln := range p.listeners {
		out[up] = ln.Addr()
	}
	return out
}

// Connections is how many client connections the proxy has taken so far,
// on all its listeners.
func (p *Proxy) Connections() int { return int(p.conns.Load()) }

// Close stops every listener, closes every relayed connection and waits.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	lns := make([]*listen.Listener, 0, len(p.order))
	for _, up := range p.order {
		lns = append(lns, p.listeners[up])
	}
	p.mu.Unlock()
	var first error
	for _, ln := range lns {
		if err := ln.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Arm adds a trigger; it applies to every connection through this proxy.
func (p *Proxy) Arm(t Trigger) (*Armed, error) {
	c, err := t.Compile()
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
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
		return nil, fmt.Errorf("kafka: %w", err)
	}
	a := &Armed{Armed: fa, Trigger: t}
	p.Add(a)
	return a, nil
}

// strikeOn counts a crossing against the waiting triggers and returns the
// one to strike now, if any. A trigger that cannot tell whether the
// crossing is its own fails as unclassifiable.
func (p *Proxy) strikeOn(x crossing) *Armed {
	for _, a := range p.Waiting() {
		if !a.Trigger.matches(x) {
			continue
		}
		ok, undecided := a.Trigger.filter(x)
		if undecided == "" && ok && a.Do == fault.Error && x.unread != "" {
			undecided = x.unread + ": the proxy cannot answer it with an error"
		}
		if undecided != "" {
			a.Fail(&fault.Unclassifiable{Reason: undecided})
			continue
		}
		if ok && a.Take() {
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

// resolve names the topics a request names by id, and returns it as the
// triggers see it. It also keeps what a transaction touched, for EndTxn.
func (p *Proxy) resolve(q *request) crossing { return p.resolveFor(q, nil) }

// resolveFor is resolve for a request of connection c (nil: none, whose
// transactions are not capped per connection).
func (p *Proxy) resolveFor(q *request, c *conn) crossing {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := crossing{key: q.key, group: q.group, groupKnown: namesGroup[q.key] && q.key != keyEndTxn, unread: q.unread}
	for i := range q.topics {
		t := &q.topics[i]
		if t.name == "" && t.id != ([16]byte{}) {
			if t.name = p.topicIDs[t.id]; t.name == "" {
				x.unresolved = true
			}
		}
		x.topics = append(x.topics, t.name)
	}
	x.accepts = q.key == keyShareFetch && q.accepts()
	if q.txnID != "" {
		p.noteTxn(q, c, &x)
	}
	return x
}

// noteTxn keeps the group and topics of a transaction (p.mu held) and
// gives an EndTxn its transaction's. A transaction the caps left
// untracked gives its EndTxn a reason a filtering trigger cannot tell.
func (p *Proxy) noteTxn(q *request, c *conn, x *crossing) {
	t, why := p.txnFor(q, c)
	if t == nil {
		if t = p.txns[q.txnID]; t == nil {
			if q.key == keyEndTxn && x.unread == "" {
				x.unread = fmt.Sprintf("the transaction %q was not tracked: %s", q.txnID, why)
			}
			return
		}
	}
	switch q.key {
	case keyProduce:
		t.addTopics(x.topics)
	case keyAddOffsetsToTxn, keyTxnOffsetCommit:
		t.group = q.group
	case keyEndTxn:
		x.group, x.groupKnown = t.group, true
		for n := range t.topics {
			x.topics = append(x.topics, n)
		}
		if t.untracked != "" && x.unread == "" {
			x.unread = t.untracked
		}
		p.dropTxn(t)
	}
}

// learnTopic keeps a topic's id from a Metadata response.
func (p *Proxy) learnTopic(id [16]byte, topic string) {
	if id == ([16]byte{}) || topic == "" {
		return
	}
	p.mu.Lock()
	p.topicIDs[id] = topic
	p.mu.Unlock()
}

// proxyAddr is the listener address for a broker a response names.
func (p *Proxy) proxyAddr(host string, port int32) (string, int32, error) {
	addr, err := p.listenerFor(net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err != nil {
		return "", 0, err
	}
	h, ps, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(ps)
	return h, int32(n), nil
}

// MaxOtherEvents bounds the events the proxy keeps of requests the
// history does not read; a trigger's strikes are always kept. The
// default of Limits.MaxOtherEvents.
const MaxOtherEvents = 1 << 16

// record numbers and keeps an event.
func (p *Proxy) record(e Event) {
	e.At = time.Now()
	if e.Kind == KindOther && p.others.Add(1) > p.limits.MaxOtherEvents && e.Fault == "" {
		return
	}
	e.Seq = p.seq.Add(1)
	p.Record(e)
}
