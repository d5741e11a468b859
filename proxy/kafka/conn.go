package kafka

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

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
	answered chan struct{}
}

func newConn(p *Proxy, id int, upstream string, client net.Conn) *conn {
	c := &conn{Pair: listen.NewPair(client), p: p, id: id, upstream: upstream, fetchAt: map[topicPartition]int64{}}
	c.Hold = p.budget.Hold()
	return c
}

func (c *conn) serve() {
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
		if b, err := rd.Peek(1); err == nil && b[0] == 0x16 {
			c.p.failAll(&fault.Unclassifiable{Reason: "a connection turned to TLS: the proxy can only relay it blindly"})
			_, _ = c.toServer.ReadFrom(rd)
			c.toServer.Flush()
			return
		}
		msg, err := readMessage(rd, MaxMessage, c.Hold)
		if err == io.EOF {
			c.HalfClose(c.toServer.Flush) // the client is done: its answers still come
			return
		}
		if err != nil {
			return // the broker closes a connection over its cap too
		}
		q, err := parseRequest(msg)
		if err != nil || !c.request(q, msg, rd.Buffered() > 0) {
			return
		}
	}
}

// request applies what the triggers say about a request and forwards it.
func (c *conn) request(q *request, msg []byte, more bool) bool {
	x := c.p.resolve(q)
	c.noteFetch(q)
	a := c.p.strikeOn(x)
	delayed := ""
	if a != nil && (a.Trigger.Boundary == Request || a.Do == fault.Error) {
		if a.Do != fault.Delay {
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
		if a != nil {
			a.Finish(&fault.Unclassifiable{Reason: "a Produce with acks=0: the broker answers nothing to hold"})
		}
		c.p.record(c.requestEvent(q, delayed, true))
		_, err := c.toServer.Write(msg)
		return err == nil
	}
	k := &call{q: q, x: x, strike: a, delayed: delayed, answered: make(chan struct{})}
	c.mu.Lock()
	c.inflight = append(c.inflight, k)
	c.last = k
	c.mu.Unlock()
	if _, err := c.toServer.Write(msg); err != nil {
		return false
	}
	if a == nil {
		return more || c.toServer.Flush() == nil
	}
	// The barrier: nothing after the request reaches the broker before
	// its fault struck.
	return c.toServer.Flush() == nil && c.Await(k.answered, replyWait, func() bool {
		return c.giveUp(k, fmt.Sprintf("no response to the %s came within %v", name(q.key), replyWait))
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
	return c.Await(last.answered, replyWait, func() bool { return true })
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
			if len(c.fetchAt) < MaxEntries || c.fetchAt[topicPartition{t.name, p.partition}] != 0 {
				c.fetchAt[topicPartition{t.name, p.partition}] = p.offset
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
		msg, err := readMessage(rd, MaxMessage, nil) // the broker's: no budget
		if err != nil || len(msg) < 8 {
			return
		}
		k := c.pop(int32(binary.BigEndian.Uint32(msg[4:8])))
		if k == nil {
			// A response to no request the proxy saw: the pairing is lost,
			// and nothing more can be attributed. The connection closes.
			return
		}
		if !c.response(k, msg, rd.Buffered() > 0) {
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
