package listen

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Clock keeps a client connection's read deadline in step with what the
// client owes the proxy: its handshake (Limits.Handshake from accept), the
// rest of a message it began (Limits.Message), a sign of life while the
// proxy owes it nothing (Limits.Idle from the last byte that crossed the
// connection). While the proxy owes the client an answer (a request in
// flight, a long poll, a blocking read) the client may say nothing for as
// long as the answer takes. A deadline that passes fails the reader's
// read: the proxy closes the connection, and its slot is free.
//
// A deadline is a read deadline, not a timer of its own: nothing runs for
// a connection that keeps its deadlines. Bytes only touch the clock (an
// atomic store); the idle deadline they move is set again, lazily, by the
// client's Reader when the old one fires.
type Clock struct {
	c        net.Conn
	lim      Limits
	last     atomic.Int64 // unix nanoseconds of the last sign of life
	mu       sync.Mutex
	shakeBy  time.Time // the handshake's end; zero once it ended (or none)
	begun    time.Time // when the message being read began
	owed     int       // answers the proxy owes the client
	owedFrom time.Time // when owed last went from 0 to 1
	awaiting bool      // the reader waits for the next message
}

// NewClock starts the handshake's clock on c.
func NewClock(c net.Conn, lim Limits) *Clock {
	k := &Clock{c: c, lim: lim, awaiting: true}
	k.last.Store(time.Now().UnixNano())
	if lim.Handshake > 0 {
		k.shakeBy = time.Now().Add(lim.Handshake)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.set()
	return k
}

// due is the deadline of the phase the connection is in, zero for none
// (k.mu held).
func (k *Clock) due() time.Time {
	var by time.Time
	switch {
	case !k.awaiting:
		if k.lim.Message > 0 {
			by = k.begun.Add(k.lim.Message)
		}
	case k.owed > 0:
	case k.lim.Idle > 0:
		by = time.Unix(0, k.last.Load()).Add(k.lim.Idle)
	}
	if !k.shakeBy.IsZero() && (by.IsZero() || k.shakeBy.Before(by)) {
		by = k.shakeBy
	}
	return by
}

// set applies the deadline (k.mu held).
func (k *Clock) set() { _ = k.c.SetReadDeadline(k.due()) }

// Touch says bytes crossed the connection: the idle deadline moves (when
// the old one fires, Reader sets the new one).
func (k *Clock) Touch() {
	if k != nil {
		k.last.Store(time.Now().UnixNano())
	}
}

// Begin says a message began arriving: its rest is due within
// Limits.Message.
func (k *Clock) Begin() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.awaiting, k.begun = false, time.Now()
	k.set()
}

// Await says a message was read whole and the reader waits for the next;
// shaken says the handshake ended with it.
func (k *Clock) Await(shaken bool) {
	k.Touch()
	k.mu.Lock()
	defer k.mu.Unlock()
	if shaken {
		k.shakeBy = time.Time{}
	}
	k.awaiting = true
	k.set()
}

// Shaken says the handshake ended, where the protocol says (a server's
// answer, a CONNECT): from now on the idle clock runs.
func (k *Clock) Shaken() {
	k.Touch()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.shakeBy = time.Time{}
	k.set()
}

// SetIdle changes Limits.Idle (0: none), counted from the last byte: a
// protocol that negotiated its keepalive (AMQP's heartbeat) sets it.
func (k *Clock) SetIdle(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lim.Idle = max(d, 0)
	k.set()
}

// Owe counts an answer the proxy owes the client (a request it forwarded).
func (k *Clock) Owe() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.owed == 0 {
		k.owedFrom = time.Now()
	}
	k.owed++
	if k.awaiting {
		k.set()
	}
}

// OwedFor is how long the proxy has owed the client an answer without a
// break (a request the server has not answered yet), 0 when it owes none.
func (k *Clock) OwedFor() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.owed == 0 {
		return 0
	}
	return time.Since(k.owedFrom)
}

// Paid says an owed answer reached the client (or was given up): with
// nothing more owed, the idle clock starts.
func (k *Clock) Paid() {
	k.Touch()
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

// rearm sets the deadline again after the read deadline fired, and
// reports whether the read may go on: a touch (or an answer now owed)
// moved the deadline past now.
func (k *Clock) rearm() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	by := k.due()
	if !by.IsZero() && !by.After(time.Now()) {
		return false
	}
	_ = k.c.SetReadDeadline(by)
	return true
}

// Reader is the client's connection as the proxy's readers read it: every
// byte touches the clock, and a read whose deadline a touch moved goes on
// instead of failing. Only a deadline that really passed fails the read.
func (k *Clock) Reader() io.Reader { return clientReader{k} }

type clientReader struct{ k *Clock }

func (r clientReader) Read(b []byte) (int, error) {
	for {
		n, err := r.k.c.Read(b)
		if n > 0 {
			r.k.Touch()
		}
		var ne net.Error
		if n > 0 || err == nil || !errors.As(err, &ne) || !ne.Timeout() || !r.k.rearm() {
			return n, err
		}
	}
}

// Touching is r (the server's side) touching the clock with every byte
// read: for a protocol whose idle limit counts bytes either way (a
// consumer the server delivers to, a subscriber it pushes to).
func (k *Clock) Touching(r io.Reader) io.Reader { return touching{r, k} }

type touching struct {
	r io.Reader
	k *Clock
}

func (t touching) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if n > 0 {
		t.k.Touch()
	}
	return n, err
}
