package nats

import (
	"strings"
	"time"
)

// What the proxy remembers of a connection (its books), within
// Limits.ConnBytes, MaxPending and MaxSubs, given back as entries go and
// all at once when the connection closes (conn.acct).

// settled removes a call from the age list and gives back its bytes: its
// reply came, or it was given up (conn.mu held).
func (c *conn) settled(k *call) {
	if k.el != nil {
		c.aged.Remove(k.el)
		k.el = nil
	}
	c.acct.Release(k.cost)
}

// age drops the records of publishes older than Limits.PendingAge whose
// reply never came (conn.mu held): a late reply passes on unpaired. A call
// a trigger holds is left to its barrier, which gives it up at ReplyWait.
// Oldest first, so each call is looked at once.
func (c *conn) age(now time.Time) {
	for e := c.aged.Front(); e != nil; {
		k := e.Value.(*call)
		if now.Sub(k.at) < c.p.lim.PendingAge {
			return
		}
		next := e.Next()
		if k.strike == nil {
			c.drop(k)
			c.p.unpaired.Add(1)
		}
		e = next
	}
}

// drop removes a call from pending (conn.mu held).
func (c *conn) drop(k *call) {
	q := c.pending[k.reply]
	for i, x := range q {
		if x == k {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(c.pending, k.reply)
	} else {
		c.pending[k.reply] = q
	}
	c.npend--
	c.settled(k)
}

// subscribe remembers a subscription, cloned (its control line may be
// long), within MaxSubs and the account; one past them goes on to the
// server unremembered.
func (c *conn) subscribe(sid, subject string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsubscribe(sid) // a SUB of a sid in use replaces it
	if len(c.subs) >= c.p.lim.MaxSubs || c.acct.Take(subCost(sid, subject)) != nil {
		return
	}
	c.subs[strings.Clone(sid)] = strings.Clone(subject)
}

// unsubscribe forgets a subscription (conn.mu held).
func (c *conn) unsubscribe(sid string) {
	if subject, ok := c.subs[sid]; ok {
		delete(c.subs, sid)
		c.acct.Release(subCost(sid, subject))
	}
}

func subCost(sid, subject string) int64 { return entryCost + int64(len(sid)+len(subject)) }
