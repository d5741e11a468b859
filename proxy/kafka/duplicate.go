package kafka

import (
	"fmt"

	"github.com/outboxdrill/runner/proxy/listen"
)

// The duplicate and drop actions on Kafka. A duplicated Produce reaches
// the broker twice, back to back, with the client's correlation id: the
// client gets the response to its own, the copy's (the offsets of a
// second copy, or, from an idempotent producer, the offsets the broker
// had already given: it dedupes the producer's sequence) is recorded and
// swallowed. A drop swallows a response and silences the connection.

// produceTwice forwards a Produce and its copy, whose bytes it takes on
// the connection's account until the copy's response. The barrier waits
// for that response: nothing the client sent after comes between.
func (c *conn) produceTwice(q *request, x crossing, a *Armed, msg []byte, tab *listen.Tab) bool {
	c.p.groups.join(q)
	ctab := c.acct.Tab()
	err := ctab.Take(int64(len(msg)))
	if err != nil {
		ctab.Done()
		a.Finish(fmt.Errorf("the copy was not sent: %w", err))
	}
	if q.acks == 0 { // no response comes to either: the history has the requests alone
		defer tab.Done()
		defer ctab.Done()
		c.p.record(c.requestEvent(q, "", true))
		n := 1
		if err == nil {
			cp := c.requestEvent(q, a.Trigger.String(), true)
			cp.Copy = true
			c.p.record(cp)
			a.Finish(nil)
			n = 2
		}
		for range n {
			if _, err := c.toServer.Write(msg); err != nil {
				return false
			}
		}
		return true
	}
	if err != nil {
		return c.forward(q, x, nil, "", msg, tab, false)
	}
	if !c.forward(q, x, nil, "", msg, tab, true) {
		return false
	}
	return c.send(&call{q: q, x: x, strike: a, copy: true, answered: make(chan struct{}), tab: ctab}, msg, false)
}

// swallowed records a response no client gets: a copy's (the strike is
// done), or one after a drop.
func (c *conn) swallowed(k *call, ev Event) bool {
	if k.copy {
		ev.Copy = true
		if a := k.strike; a != nil { // nil: the barrier gave up on it (giveUp said why)
			ev.Fault = a.Trigger.String()
			a.Finish(nil)
		}
		c.p.record(ev)
		return true
	}
	ev.Dropped = true
	c.p.record(ev)
	return true
}

// drop swallows a response: what came before reaches the client, then
// nothing more does.
func (c *conn) drop(a *Armed, ev Event) bool {
	ev.Dropped = true
	c.p.record(ev)
	ok := c.Write(nil, true)
	c.silenced.Store(true)
	a.Finish(nil)
	return ok
}
