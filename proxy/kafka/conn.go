package kafka

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// conn relays one client connection to one broker: fromClient forwards
// requests and queues a call for each that gets a response; fromServer
// pairs each response with its call, in order.
type conn struct {
	*listen.Pair
	p        *Proxy
	id       int
	upstream string
	server   net.Conn
	toServer *bufio.Writer // fromClient only

	mu       sync.Mutex
	inflight []*call
	last     *call // the last call queued: a request fault waits for its response
	// fetchAt is the offset this connection last fetched each partition
	// from: a fetch session's request names only what changed.
	fetchAt map[topicPartition]int64

	acct  *listen.ConnAccount // what this connection holds, on its proxy's account
	clock *listen.Clock       // its handshake, idle and message deadlines
	txns  map[*txn]bool       // the open transactions it keeps (p.mu)
	// rspend is what the response being read may build (fromServer only;
	// nil: a message's cap alone).
	rspend *spend
	// silenced: a drop struck. Nothing more reaches the client, and
	// nothing more it sends reaches the broker: a client pairs responses
	// by correlation id in order, so one passed after a lost one would
	// break its connection as no lost packet does.
	silenced atomic.Bool
}

type topicPartition struct {
	topic     string
	partition int32
}

// call is a request awaiting its response.
type call struct {
	q      *request
	x      crossing
	strike *Armed // a reply trigger: hold the response
	// delayed is the request trigger that delayed it, "" for none: its
	// event (recorded with the response) says it struck there.
	delayed  string
	copy     bool // a duplicated Produce's copy: its response is the proxy's, never the client's
	answered chan struct{}
	tab      *listen.Tab // the request's bytes and what was built of them: given back once answered
}

func newConn(p *Proxy, id int, upstream string, client net.Conn) *conn {
	return &conn{Pair: listen.NewPair(client), p: p, id: id, upstream: upstream, fetchAt: map[topicPartition]int64{},
		acct: p.acct.Conn(), clock: listen.NewClock(client, p.limits.Limits), txns: map[*txn]bool{}}
}

func (c *conn) serve() {
	defer c.acct.Close() // last: every byte the connection held is gone with it
	defer c.p.closeTxns(c)
	defer c.Close()
	server, err := c.Dial(c.upstream)
	if err != nil {
		return // Kafka has no word for it: the client sees the connection close
	}
	c.server, c.toServer = server, bufio.NewWriterSize(server, 64<<10)
	go c.fromServer()
	c.fromClient()
}

func (c *conn) fromClient() {
	defer c.Close()
	rd := bufio.NewReaderSize(c.Client, 64<<10)
	for {
		if rd.Buffered() == 0 && c.toServer.Flush() != nil { // before waiting for more, what was sent goes out
			return
		}
		if c.silenced.Load() {
			// After a drop the connection stays open and silent until
			// the client gives up on it, as over a lost packet.
			_, _ = io.Copy(io.Discard, rd)
			return
		}
		if b, err := rd.Peek(1); err == nil && b[0] == 0x16 {
			c.p.failAll(&fault.Unclassifiable{Reason: "a connection turned to TLS: the proxy can only relay it blindly"})
			c.clock.Stop() // what is owed can no longer be told
			_, _ = c.toServer.ReadFrom(rd)
			c.toServer.Flush()
			return
		}
		tab := c.acct.Tab()
		msg, err := readMessage(rd, MaxMessage, tab, c.clock.Begin)
		if err == io.EOF {
			c.HalfClose(c.toServer.Flush) // the client is done: its answers still come
			return
		}
		if err != nil {
			return // the broker closes a connection over its cap too; a deadline passed
		}
		c.clock.Await(true)
		q, err := parseRequest(msg)
		if err != nil || !c.request(q, msg, tab, rd.Buffered() > 0) {
			return
		}
	}
}

// refusal says why the proxy will not forward a request ("" for none):
// an API it does not know, more entries than it reads, more than its
// account holds of what the request names or builds. A Produce's records
// are read here, before it goes on: what they inflate to is taken as it
// inflates, so a Produce that builds past the caps is refused before the
// broker sees it.
func (c *conn) refusal(q *request, tab *listen.Tab) error {
	if q.over != "" {
		return errors.New(q.over)
	}
	if err := tab.Take(int64(q.entries) * entryCost); err != nil {
		return listen.Named(err, fmt.Sprintf("the %d entries of a %s", q.entries, name(q.key)))
	}
	if q.key != keyProduce || q.unread != "" {
		return nil
	}
	s := newSpend(tab)
	for i := range q.topics {
		t := &q.topics[i]
		for j := range t.parts {
			if err := t.parts[j].parse(t.name, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// entryCost is what one entry a request names costs as the proxy keeps
// it (a topic's or a partition's struct, its slot).
const entryCost = 128

// refuse answers a request the proxy will not forward, after the answers
// to what came before: a Produce with MESSAGE_TOO_LARGE on every partition
// (what the broker says of a request over its caps), an ApiVersions of an
// unknown version with UNSUPPORTED_VERSION (as the broker does); any other
// closes the connection, as the broker closes one whose request it cannot
// read. The event names the refusal.
func (c *conn) refuse(q *request, why error) bool {
	ev := Event{Conn: c.id, Broker: c.upstream, API: name(q.key), Version: q.version, Kind: kindOf(q.key),
		TransactionalID: q.txnID, Unread: "refused by the proxy: " + why.Error(), Dropped: true}
	c.p.record(ev)
	var answer kmsg.Response
	switch {
	case q.key == keyProduce && q.over == "" && q.acks != 0:
		answer = produceErrorCode(q, errMessageTooLarge)
	case q.key == keyApiVersions && q.over != "":
		answer = unsupportedVersion()
		q.version = 0 // a client reads the answer as v0
	default:
		return false // acks=0 too: the broker closes the connection, the only way it can tell
	}
	if !c.drain() || c.toServer.Flush() != nil {
		return false
	}
	return c.Write(encodeResponse(q, answer), true)
}

// request applies what the triggers say about a request and forwards it.
// The request's tab is given back once its bytes are gone: at once if it
// is not forwarded or gets no response, else once its response is handled.
func (c *conn) request(q *request, msg []byte, tab *listen.Tab, more bool) bool {
	if err := c.refusal(q, tab); err != nil {
		defer tab.Done()
		return c.refuse(q, err)
	}
	x := c.p.resolveFor(q, c)
	c.noteFetch(q)
	a := c.p.strikeOn(x)
	if a != nil && a.Do == fault.Duplicate {
		return c.produceTwice(q, x, a, msg, tab)
	}
	delayed := ""
	if a != nil && (a.Trigger.Boundary == Request || a.Do == fault.Error) {
		if a.Do != fault.Delay {
			defer tab.Done()
			return c.strikeRequest(a, q)
		}
		if !c.drain() || c.toServer.Flush() != nil || !a.Hold(c.Done, c.Close, func() bool { return true }) {
			return false
		}
		a, delayed = nil, a.Trigger.String() // the delay has passed: the request goes on
	}
	c.p.groups.join(q) // it goes on to the broker
	if q.key == keyProduce && q.acks == 0 {
		// No response comes: the history has the request alone.
		defer tab.Done()
		if a != nil {
			a.Finish(&fault.Unclassifiable{Reason: "a Produce with acks=0: the broker answers nothing to hold"})
		}
		c.p.record(c.requestEvent(q, delayed, true))
		_, err := c.toServer.Write(msg)
		return err == nil
	}
	return c.forward(q, x, a, delayed, msg, tab, more)
}

// forward sends a request that gets a response, queued as a call.
func (c *conn) forward(q *request, x crossing, a *Armed, delayed string, msg []byte, tab *listen.Tab, more bool) bool {
	return c.send(&call{q: q, x: x, strike: a, delayed: delayed, answered: make(chan struct{}), tab: tab}, msg, more)
}

// send queues a call and forwards its request; a call a trigger holds
// waits for its response.
func (c *conn) send(k *call, msg []byte, more bool) bool {
	q, a := k.q, k.strike
	c.mu.Lock()
	c.inflight = append(c.inflight, k)
	c.last = k
	c.mu.Unlock()
	c.clock.Owe()
	if _, err := c.toServer.Write(msg); err != nil {
		return false
	}
	if a == nil {
		return more || c.toServer.Flush() == nil
	}
	// The barrier: nothing after the request reaches the broker before
	// its fault struck.
	return c.toServer.Flush() == nil && c.Await(k.answered, c.p.limits.ReplyWait, func() bool {
		return c.giveUp(k, fmt.Sprintf("no response to the %s came within %v", name(q.key), c.p.limits.ReplyWait))
	})
}

// strikeRequest applies a kill, cut or error before the request reaches
// the broker: it never does. The responses to what the client sent
// before reach it first.
func (c *conn) strikeRequest(a *Armed, q *request) bool {
	if !c.drain() || c.toServer.Flush() != nil {
		return false
	}
	ev := c.requestEvent(q, a.Trigger.String(), true)
	ev.Dropped = true
	c.p.record(ev)
	if a.Do != fault.Error {
		return a.Hold(c.Done, c.Close, func() bool { return true })
	}
	a.Finish(nil)
	if q.key == keyProduce && q.acks == 0 {
		return true // the client hears nothing of it: it is lost
	}
	return c.Write(encodeResponse(q, errorResponse(q)), true)
}

// drain waits until every response to what the client sent before has
// reached it.
func (c *conn) drain() bool {
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if last == nil {
		return true
	}
	return c.Await(last.answered, c.p.limits.ReplyWait, func() bool { return true })
}

// giveUp drops a held call whose response never came (false: it is being
// handled).
func (c *conn) giveUp(k *call, why string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.inflight {
		if x == k {
			k.strike.Finish(&fault.Unclassifiable{Reason: why})
			k.strike = nil // the response, when it comes, passes
			return true
		}
	}
	return false
}

// noteFetch keeps the offsets a Fetch asks from: a response's records
// below them are dropped by the client, and so by the history.
func (c *conn) noteFetch(q *request) {
	if q.key != keyFetch || q.unread != "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range q.topics {
		for _, p := range t.parts {
			tp := topicPartition{t.name, p.partition}
			if _, ok := c.fetchAt[tp]; ok {
				c.fetchAt[tp] = p.offset
				continue
			}
			// A new partition is kept on the connection's account (its
			// name may be 32 KiB), for as long as the connection lives.
			if len(c.fetchAt) < MaxEntries && c.acct.Take(int64(64+len(t.name))) == nil {
				c.fetchAt[tp] = p.offset
			}
		}
	}
}

func (c *conn) fromServer() {
	defer c.Close()
	rd := bufio.NewReaderSize(c.server, 64<<10)
	for {
		if rd.Buffered() == 0 && !c.Write(nil, true) { // before waiting for more, what was sent goes out
			return
		}
		// The broker's answer is held on the client's account too: the
		// client asked for it (a Fetch of 64 MB).
		tab := c.acct.Tab()
		msg, err := readMessage(rd, MaxMessage, tab, nil)
		if err != nil || len(msg) < 8 {
			return
		}
		k := c.pop(int32(binary.BigEndian.Uint32(msg[4:8])))
		if k == nil {
			// A response to no request the proxy saw: the pairing is lost,
			// and nothing more can be attributed. The connection closes.
			return
		}
		c.rspend = newSpend(tab)
		ok := c.response(k, msg, rd.Buffered() > 0)
		c.rspend = nil
		tab.Done()
		k.tab.Done()
		c.clock.Paid()
		if !ok {
			return
		}
	}
}

// pop takes the call a response answers: the first in flight.
func (c *conn) pop(corr int32) *call {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.inflight) == 0 || c.inflight[0].q.corr != corr {
		return nil
	}
	k := c.inflight[0]
	c.inflight = c.inflight[1:]
	return k
}

// response passes a response on (its broker addresses rewritten), or holds
// it for a fault.
func (c *conn) response(k *call, msg []byte, more bool) bool {
	defer close(k.answered)
	msg, ev, x, err := c.readResponse(k, msg)
	if err != nil {
		// A response the proxy must rewrite but cannot read would lead the
		// client around the proxy: the connection closes instead.
		c.p.record(Event{Conn: c.id, Broker: c.upstream, API: name(k.q.key), Unread: err.Error()})
		return false
	}
	if k.copy || c.silenced.Load() {
		return c.swallowed(k, ev)
	}
	a := k.strike
	if a == nil && x.fromServer {
		a = c.p.strikeOn(x)
	}
	if a == nil {
		c.p.record(ev)
		_ = c.Write(msg, !more)
		return true
	}
	ev.Fault = a.Trigger.String()
	if a.Do == fault.Drop {
		return c.drop(a, ev)
	}
	if a.Do == fault.Error { // a delivery: the client gets an error instead, and fetches again
		ev.Dropped = true
		c.p.record(ev)
		a.Finish(nil)
		return c.Write(encodeResponse(k.q, errorResponse(k.q)), true)
	}
	c.p.record(ev)
	if !c.Write(nil, true) { // what came before reaches the client first
		return false
	}
	return a.Hold(c.Done, c.Close, func() bool { return c.Write(msg, true) })
}
