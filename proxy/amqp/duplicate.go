package amqp

import (
	"fmt"

	"github.com/outboxdrill/runner/proxy/fault"
)

// The duplicate action on AMQP 0-9-1. A duplicated basic.publish (with
// its content) reaches the broker twice, back to back: the exchange
// routes two copies, inside the channel's transaction when it has one.
// On a channel in confirm mode the broker would number the copy's confirm
// too, and every confirm after would name another publish than the
// client's: unclassifiable. A duplicated delivery reaches the client
// twice only where no ack follows (a no-ack consumer or basic.get): the
// client would ack an acked delivery tag again, which closes the channel
// (406 PRECONDITION_FAILED, unknown delivery tag): unclassifiable. Each
// copy costs what it weighs on the connection's account while it is sent.

// publishTwice forwards a publish and, where exact, its copy.
func (c *conn) publishTwice(a *Armed, u *unit, ev Event, more bool) bool {
	if ev.Tag > 0 {
		c.p.record(ev)
		a.Finish(&fault.Unclassifiable{Reason: fmt.Sprintf("basic.publish on channel %d in confirm mode: the broker would confirm the copy with a number of its own, and every later confirm would name another publish than the client's", u.ch)})
		return sendFrames(u, c.sendServer, !more)
	}
	if err := c.acct.Take(u.cost); err != nil {
		c.p.record(ev)
		a.Finish(fmt.Errorf("the copy was not sent: %w", err))
		return sendFrames(u, c.sendServer, !more)
	}
	defer c.acct.Release(u.cost)
	c.p.record(ev)
	cp := ev
	cp.Fault, cp.Copy = a.Trigger.String(), true
	c.p.record(cp)
	a.Finish(nil)
	return sendFrames(u, c.sendServer, false) && sendFrames(u, c.sendServer, !more)
}

// deliverTwice hands a delivery that takes no ack to the client twice.
func (c *conn) deliverTwice(a *Armed, u *unit, x crossing, ev Event) bool {
	why := ""
	switch {
	case x.kind != KindDelivery:
		why = u.m.name() + " is no delivery"
	case !x.noAck:
		why = fmt.Sprintf("%s with delivery tag %d awaits an ack: the client would ack the tag twice, and the broker closes the channel on the second", u.m.name(), u.m.deliveryTag)
	}
	var err error
	if why == "" {
		err = c.acct.Take(u.cost)
	}
	if why != "" || err != nil {
		ev.Fault = ""
		c.p.record(ev)
		if why != "" {
			a.Finish(&fault.Unclassifiable{Reason: why})
		} else {
			a.Finish(fmt.Errorf("the copy was not handed out: %w", err))
		}
		return sendFrames(u, c.Write, true)
	}
	defer c.acct.Release(u.cost)
	c.p.record(ev)
	cp := ev
	cp.Copy = true
	c.p.record(cp)
	a.Finish(nil)
	return sendFrames(u, c.Write, false) && sendFrames(u, c.Write, true)
}
