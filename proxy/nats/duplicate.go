package nats

import (
	"fmt"

	"github.com/outboxdrill/runner/proxy/fault"
)

// The duplicate action on NATS. A duplicated JetStream publish reaches
// the server twice, back to back, on the client's reply subject: the
// client gets the first PubAck, the copy's (a second sequence, or
// "duplicate": true where the stream dedupes the Nats-Msg-Id: what
// JetStream did) is recorded and swallowed. A duplicated delivery reaches
// the client twice, the same message with the same $JS.ACK subject: a
// second ack of it is one JetStream ignores. Each copy costs what it
// weighs on the connection's account while it is written.

// publishTwice forwards a publish and its copy, and waits for the copy's
// PubAck (the barrier: nothing the client sent after comes between).
func (c *conn) publishTwice(a *Armed, m *msg, x crossing, ev Event) bool {
	c.awaitConsumerReply(m)
	c.expect(m, x, nil, c.p.record(ev, m)) // the client's: its PubAck passes as any does
	cost := int64(len(m.raw))
	if err := c.acct.Take(cost); err != nil {
		a.Finish(fmt.Errorf("the copy was not sent: %w", err))
		return c.send(m.raw, false)
	}
	defer c.acct.Release(cost)
	cp := ev
	cp.Fault, cp.Copy = a.Trigger.String(), true
	k2 := c.expect(m, x, a, c.p.record(cp, m)) // nil: a.Finish said why
	if k2 != nil {
		k2.copy = true // not sent yet: no reply has taken it
	}
	if !c.send(m.raw, true) || k2 != nil && !c.send(m.raw, false) {
		return false
	}
	if k2 == nil {
		return c.send(nil, false)
	}
	return c.barrier(k2)
}

// copyAnswered records the server's reply to a publish's copy: the client
// sent one publish, and is not told of the second.
func (c *conn) copyAnswered(k *call, ev Event, m *msg) bool {
	ev.Copy = true
	c.p.record(ev, m)
	k.strike.Finish(nil)
	return true
}

// deliverTwice hands a delivery to the client twice; its second event is
// the proxy's copy. Only a JetStream delivery is duplicated: anything
// else a trigger met there is unclassifiable, and passes as it came.
func (c *conn) deliverTwice(a *Armed, x crossing, ev Event, m *msg) bool {
	if x.kind != KindDelivery {
		ev.Fault = ""
		c.p.record(ev, m)
		a.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("the message on %s is no JetStream delivery", x.subject)})
		return c.Write(m.raw, true)
	}
	cost := int64(len(m.raw))
	if err := c.acct.Take(cost); err != nil {
		c.p.record(ev, m)
		a.Finish(fmt.Errorf("the copy was not handed out: %w", err))
		return c.Write(m.raw, true)
	}
	defer c.acct.Release(cost)
	c.p.record(ev, m)
	cp := ev
	cp.Copy = true
	c.p.record(cp, m)
	a.Finish(nil)
	return c.Write(m.raw, false) && c.Write(m.raw, true)
}
