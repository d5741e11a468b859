package amqp

import (
	"fmt"
	"slices"

	"github.com/outboxdrill/runner/proxy/fault"
)

// maxTracked bounds the deliveries the proxy remembers per channel (to
// tell an ack's queue): an unacknowledged consumer's prefetch is far less.
const maxTracked = 1 << 16

// channel is what the proxy keeps of one of a connection's channels,
// under conn.mu.
type channel struct {
	confirm, tx bool
	nextTag     uint64  // the confirm number of the channel's last publish
	unconfirmed []*call // held publishes awaiting their confirm, by tag
	awaiting    *call   // the client's synchronous method whose answer is held

	consumers      map[string]string // consumer tag → queue
	noAck          map[string]bool   // consumer tags that take no acks
	consuming      string            // the queue of a basic.consume awaiting its consume-ok
	consumingNoAck bool
	getQueue       string // the queue of a basic.get awaiting its answer
	getNoAck       bool
	delivered      map[uint64]string // delivery tag → queue, of deliveries to be acked

	closing *closing // the proxy is closing the channel (an error fault)
	in      [2]*unit // the message being assembled: [fromClient], [fromServer]
}

// The directions, as channel.in indexes them.
const (
	fromClient = 0
	fromServer = 1
)

// closing is a channel the proxy closes on both sides: each side's close
// handshake ends apart.
type closing struct {
	client, server bool
	serverDone     chan struct{}
}

// call is a client's method whose answer the proxy holds for a trigger.
type call struct {
	seq      int64
	ch       uint16
	tag      uint64     // a publish's confirm number
	replies  []methodID // a synchronous method's answers
	x        crossing
	strike   *Armed
	answered chan struct{}
}

func newChannel() *channel {
	return &channel{consumers: map[string]string{}, noAck: map[string]bool{}, delivered: map[uint64]string{}}
}

// channel is a channel's state, made on first use (conn.mu held).
func (c *conn) channel(id uint16) *channel {
	ch := c.chans[id]
	if ch == nil {
		ch = newChannel()
		c.chans[id] = ch
	}
	return ch
}

// track remembers a delivery's queue for the acks to come.
func (ch *channel) track(tag uint64, queue string, noAck bool) {
	if !noAck && len(ch.delivered) < maxTracked {
		ch.delivered[tag] = queue
	}
}

// acked is the queue of the delivery an ack names (the last, of a
// multiple ack), whether the proxy saw it, and forgets what it covers.
func (ch *channel) acked(tag uint64, multiple bool) (string, bool) {
	queue, known := ch.delivered[tag]
	if multiple && tag == 0 { // all delivered so far
		for _, q := range ch.delivered {
			queue, known = q, true
		}
	}
	for t := range ch.delivered {
		if t == tag || multiple && (tag == 0 || t < tag) {
			delete(ch.delivered, t)
		}
	}
	return queue, known
}

// confirmed takes the held publishes a confirm covers.
func (ch *channel) confirmed(tag uint64, multiple bool) []*call {
	var out []*call
	ch.unconfirmed = slices.DeleteFunc(ch.unconfirmed, func(k *call) bool {
		if k.tag == tag || multiple && k.tag < tag {
			out = append(out, k)
			return true
		}
		return false
	})
	return out
}

// answer takes the held synchronous method a server's method answers.
func (ch *channel) answer(m *method) *call {
	k := ch.awaiting
	if k == nil || !slices.Contains(k.replies, m.id) && m.name() != "channel.close" {
		return nil
	}
	ch.awaiting = nil
	return k
}

// release ends every held call of a channel that goes away: its trigger
// fails (its answer will never come) and its barrier opens.
func (ch *channel) release(why string) {
	calls := ch.unconfirmed
	if ch.awaiting != nil {
		calls = append(calls, ch.awaiting)
	}
	ch.unconfirmed, ch.awaiting = nil, nil
	for _, k := range calls {
		k.strike.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("the answer to %s never came: %s", k.x.method, why)})
		close(k.answered)
	}
}

// forget removes a call whose answer did not come in time; false if its
// answer is being handled.
func (c *conn) forget(k *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.chans[k.ch]
	if ch == nil {
		return false
	}
	if ch.awaiting == k {
		ch.awaiting = nil
		return true
	}
	n := len(ch.unconfirmed)
	ch.unconfirmed = slices.DeleteFunc(ch.unconfirmed, func(x *call) bool { return x == k })
	return len(ch.unconfirmed) < n
}

// dropChannel forgets a channel that closed (conn.mu held).
func (c *conn) dropChannel(id uint16) {
	if ch := c.chans[id]; ch != nil {
		ch.release("the channel closed")
		c.unassemble(ch)
		delete(c.chans, id)
	}
}

// noteClient keeps what a client's method says of its channel and returns
// it as the triggers see it, with a publish's confirm number.
func (c *conn) noteClient(u *unit) (x crossing, tag uint64, tx bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, m := c.channel(u.ch), &u.m
	x = crossing{method: m.name(), exchange: m.exchange, routingKey: m.routingKey, queue: m.queue}
	switch m.name() {
	case "basic.publish":
		x.kind, tx = KindPublish, ch.tx
		if ch.confirm {
			ch.nextTag++
			tag = ch.nextTag
		}
	case "basic.ack", "basic.nack", "basic.reject":
		x.kind, tx = KindAck, ch.tx
		x.queue, x.queueKnown = ch.acked(m.deliveryTag, m.multiple)
	case "confirm.select":
		ch.confirm = true // the broker counts the publishes from here
	case "tx.select":
		x.kind, ch.tx = KindTx, true
	case "tx.commit", "tx.rollback":
		x.kind = KindTx
	case "basic.get":
		ch.getQueue, ch.getNoAck = m.queue, m.noAck
	case "basic.consume":
		ch.consuming, ch.consumingNoAck = m.queue, m.noAck
		if m.consumerTag != "" {
			ch.consumers[m.consumerTag], ch.noAck[m.consumerTag] = m.queue, m.noAck
		}
	case "channel.open", "channel.close":
		x.kind = KindChannel
	case "channel.close-ok": // the client's answer to the broker's close
		x.kind = KindChannel
		c.dropChannel(u.ch)
	}
	return x, tag, tx
}

// noteServer keeps what a server's method says of its channel and returns
// it as the triggers see it, with the held calls it answers.
func (c *conn) noteServer(u *unit) (x crossing, calls []*call, answers int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, m := c.channel(u.ch), &u.m
	x = crossing{method: m.name(), exchange: m.exchange, routingKey: m.routingKey, fromServer: true}
	switch m.name() {
	case "basic.ack", "basic.nack":
		if ch.confirm {
			x.kind, calls = KindConfirm, ch.confirmed(m.deliveryTag, m.multiple)
		}
	case "basic.deliver":
		x.kind, x.queue, x.noAck = KindDelivery, ch.consumers[m.consumerTag], ch.noAck[m.consumerTag]
		ch.track(m.deliveryTag, x.queue, x.noAck)
	case "basic.get-ok":
		x.kind, x.queue, x.noAck = KindDelivery, ch.getQueue, ch.getNoAck
		ch.track(m.deliveryTag, x.queue, x.noAck)
	case "basic.consume-ok":
		ch.consumers[m.consumerTag], ch.noAck[m.consumerTag] = ch.consuming, ch.consumingNoAck
	case "tx.select-ok", "tx.commit-ok", "tx.rollback-ok":
		x.kind = KindTx
	case "channel.open-ok", "channel.close", "channel.close-ok":
		x.kind = KindChannel
	}
	if k := ch.answer(m); k != nil {
		calls, answers = append(calls, k), k.seq
	}
	if m.name() == "channel.close-ok" { // the broker's answer to the client's close
		c.dropChannel(u.ch)
	}
	return x, calls, answers
}

// expect registers the answer a reply trigger holds for a client's method.
func (c *conn) expect(u *unit, x crossing, a *Armed, seq int64, tag uint64) *call {
	if a == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, m := c.channel(u.ch), &u.m
	k := &call{seq: seq, ch: u.ch, tag: tag, replies: m.info.replies, x: x, strike: a, answered: make(chan struct{})}
	var why string
	switch {
	case m.name() == "basic.publish" && tag == 0:
		why = fmt.Sprintf("basic.publish on channel %d, which is not in confirm mode: the broker answers nothing to hold (a transaction's is reply(tx.commit))", u.ch)
	case m.name() == "basic.publish":
		ch.unconfirmed = append(ch.unconfirmed, k)
		return k
	case m.noWait:
		why = m.name() + " with no-wait: the broker answers nothing to hold"
	case len(m.info.replies) > 0:
		ch.awaiting = k
		return k
	default:
		why = "the broker answers nothing to " + m.name()
	}
	a.Finish(&fault.Unclassifiable{Reason: why})
	return nil
}
