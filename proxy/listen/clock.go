package listen

import (
	"net"
	"sync"
	"time"
)

// Clock keeps a client connection's read deadline in step with what the
// client owes the proxy: its handshake (Limits.Handshake from accept), the
// rest of a message it began (Limits.Message), its next message while the
// proxy owes it nothing (Limits.Idle). While the proxy owes the client an
// answer (a request in flight, a long poll) the client may say nothing
// for as long as the answer takes. A deadline that passes fails the
// reader's read: the proxy closes the connection, and its slot is free.
// A zero duration is no limit.
type Clock struct {
	c        net.Conn
	lim      Limits
	mu       sync.Mutex
	shakeBy  time.Time // the handshake's end; zero once it ended
	owed     int       // answers the proxy owes the client
	awaiting bool      // the reader waits for the next message
}

// NewClock starts the handshake's clock on c.
func NewClock(c net.Conn, lim Limits) *Clock {
	k := &Clock{c: c, lim: lim, awaiting: true}
	if lim.Handshake > 0 {
		k.shakeBy = time.Now().Add(lim.Handshake)
	}
	k.set()
	return k
}

// set applies the deadline of the phase the connection is in (k.mu held).
func (k *Clock) set() {
	var by time.Time
	switch {
	case !k.awaiting:
		if k.lim.Message > 0 {
			by = time.Now().Add(k.lim.Message)
		}
	case k.owed > 0:
	case k.lim.Idle > 0:
		by = time.Now().Add(k.lim.Idle)
	}
	if !k.shakeBy.IsZero() && (by.IsZero() || k.shakeBy.Before(by)) {
		by = k.shakeBy
	}
	_ = k.c.SetReadDeadline(by)
}

// Begin says a message began arriving: its rest is due within
// Limits.Message.
func (k *Clock) Begin() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.awaiting = false
	k.set()
}

// Await says a message was read whole and the reader waits for the next;
// shaken says the handshake ended with it.
func (k *Clock) Await(shaken bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if shaken {
		k.shakeBy = time.Time{}
	}
	k.awaiting = true
	k.set()
}

// Owe counts an answer the proxy owes the client (a request it forwarded).
func (k *Clock) Owe() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.owed++
	if k.awaiting {
		k.set()
	}
}

// Paid says an owed answer reached the client (or was given up): with
// nothing more owed, the idle clock starts.
func (k *Clock) Paid() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.owed = max(k.owed-1, 0)
	if k.awaiting {
		k.set()
	}
}

// Stop lifts every deadline: the connection is relayed blindly from now
// on, and the proxy can no longer tell what is owed.
func (k *Clock) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lim, k.shakeBy = Limits{}, time.Time{}
	_ = k.c.SetReadDeadline(time.Time{})
}
