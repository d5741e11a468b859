package listen

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Limits is what one proxy lets its clients cost: the memory they make it
// hold and how long they may keep a slot without a word. Every proxy is
// given its own (its ListenWith; Listen gives its DefaultLimits), so that
// a test lowers them on the proxy it builds, never through a package
// variable every proxy reads. A zero duration is no limit.
type Limits struct {
	// ConnBytes bounds what one connection makes the proxy hold at once:
	// the bytes of its messages as they arrived, and what the proxy built
	// from them (copies its parser made, inflated record batches, decoded
	// entries, records it keeps until an answer comes).
	ConnBytes int64
	// TotalBytes bounds the same for all the proxy's connections together,
	// so that MaxConns connections at ConnBytes each cannot add up.
	TotalBytes int64
	// Handshake bounds the time from accept to the end of the client's
	// handshake (for a protocol without one, its first whole message): a
	// connection that says nothing holds a slot only that long.
	Handshake time.Duration
	// Idle bounds the time nothing crossed a connection (the client's
	// bytes, and those of the server a proxy tells its Clock of) while the
	// proxy owes the client no answer. A protocol sets it from what it
	// negotiated (AMQP: twice the heartbeat) with Clock.SetIdle.
	Idle time.Duration
	// Message bounds the time from a message's first byte to its last: a
	// client that announces a large message and trickles it holds its
	// bytes only that long (for a proxy that calls Clock.Begin).
	Message time.Duration
	// RecordBytes bounds what the proxy keeps of the traffic it relayed,
	// for the history (its fault.Registry's record): a client in a loop
	// of large publishes would otherwise grow the runner. 0 is the
	// default, fault.MaxRecordBytes, never "none".
	RecordBytes int64
}

// Default sets *v to d when it is 0 or less: a cap or a wait a proxy's
// Limits leave unset is the proxy's default, so that a Limits built field
// by field is never weaker than DefaultLimits (no cap) nor stricter than
// the protocol allows (a cap of 0 refuses everything).
func Default[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Account is the proxy's account of Limits.ConnBytes and TotalBytes.
func (l Limits) Account() *Account { return NewAccount(l.ConnBytes, l.TotalBytes) }

// Account is a proxy's memory account: every byte its connections hold,
// each connection's share within Limits.ConnBytes and all of them within
// Limits.TotalBytes. Shared by the proxy's connections (and its listeners).
type Account struct {
	perConn, total int64
	used           atomic.Int64
}

// NewAccount is an account of perConn bytes a connection, total bytes in
// all (each at least 1).
func NewAccount(perConn, total int64) *Account {
	return &Account{perConn: max(perConn, 1), total: max(total, 1)}
}

// Used is what the proxy's connections hold now.
func (a *Account) Used() int64 { return a.used.Load() }

// Total is the account's cap for all connections together.
func (a *Account) Total() int64 { return a.total }

// PerConn is the account's cap for one connection.
func (a *Account) PerConn() int64 { return a.perConn }

func (a *Account) take(n int64) bool {
	for {
		used := a.used.Load()
		if used+n > a.total {
			return false
		}
		if a.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Conn opens a connection's share of the account (nil a: a share that
// takes anything, for a peer the proxy trusts).
func (a *Account) Conn() *ConnAccount {
	if a == nil {
		return nil
	}
	return &ConnAccount{a: a}
}

// ConnAccount is one connection's share of an Account. Its reader takes,
// and gives back once the bytes are gone; the connection's close (from any
// goroutine) gives back everything and takes nothing more, so that a
// reader still running after the close cannot take what would never come
// back.
type ConnAccount struct {
	a      *Account
	mu     sync.Mutex
	used   int64
	closed bool
}

// Take takes n more bytes, or says which cap they would go over (an
// *OverError, nothing taken then): the caller refuses what needed them.
// The error is decided under the connection's lock, with the figures
// that refused it, so that it names the cap actually hit.
func (c *ConnAccount) Take(n int64) error {
	if c == nil || n <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return &OverError{N: n, Closed: true}
	case c.used+n > c.a.perConn:
		return &OverError{N: n, Conn: true, Cap: c.a.perConn, Held: c.used}
	case !c.a.take(n):
		return &OverError{N: n, Cap: c.a.total, Held: c.a.used.Load()}
	}
	c.used += n
	return nil
}

// Release gives back n bytes, never more than the connection holds (a
// double release cannot lend another connection bytes in use).
func (c *ConnAccount) Release(n int64) {
	if c == nil || n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n = min(n, c.used)
	c.used -= n
	c.a.used.Add(-n)
}

// Held is what the connection holds now.
func (c *ConnAccount) Held() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Close gives back all the connection holds, for good.
func (c *ConnAccount) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.a.used.Add(-c.used)
	c.used, c.closed = 0, true
}

// Tab is what one message took of its connection's account: every take for
// it (its bytes, what was built from them) goes on the tab, and Done gives
// back exactly that, once the message and all built from it are gone. A
// tab passes from the reading goroutine to the one that finishes the
// message; its takes are atomic so that the hand-over needs no lock.
type Tab struct {
	c *ConnAccount
	n atomic.Int64
}

// Tab opens a tab on the connection's account (nil c: a nil tab, which
// takes anything).
func (c *ConnAccount) Tab() *Tab {
	if c == nil {
		return nil
	}
	return &Tab{c: c}
}

// Take takes n bytes for the message, or says which cap they would go
// over (see ConnAccount.Take).
func (t *Tab) Take(n int64) error {
	if t == nil {
		return nil
	}
	if err := t.c.Take(n); err != nil {
		return err
	}
	t.n.Add(max(n, 0))
	return nil
}

// Held is what the tab took so far.
func (t *Tab) Held() int64 {
	if t == nil {
		return 0
	}
	return t.n.Load()
}

// Done gives back what the tab took; a second Done gives back nothing.
func (t *Tab) Done() {
	if t == nil {
		return
	}
	t.c.Release(t.n.Swap(0))
}

// OverError says what a connection would hold went over a cap: which
// one, with the figures that refused it.
type OverError struct {
	What      string // "a message of 1048576 bytes", "inflated record batches"; "": N more bytes
	N         int64  // the bytes refused
	Conn      bool   // the connection's cap (else the proxy's, all connections)
	Closed    bool   // the connection is closing: nothing more is taken
	Cap, Held int64
}

func (e *OverError) Error() string {
	if e.What == "" {
		switch {
		case e.Closed:
			return "the connection is closing"
		case e.Conn:
			return fmt.Sprintf("%d more bytes would take the connection over the proxy's cap of %d bytes for one connection (it holds %d)", e.N, e.Cap, e.Held)
		}
		return fmt.Sprintf("%d more bytes would take the proxy over its cap of %d bytes for all its connections at once (%d in use)", e.N, e.Cap, e.Held)
	}
	switch {
	case e.Closed:
		return e.What + ": the connection is closing"
	case e.Conn:
		return fmt.Sprintf("%s: over the proxy's cap of %d bytes for one connection (it holds %d)", e.What, e.Cap, e.Held)
	}
	return fmt.Sprintf("%s: over the proxy's cap of %d bytes for all its connections at once (%d in use)", e.What, e.Cap, e.Held)
}

// Named is err with what the refused bytes were for, when it is an
// *OverError (a copy: the caller's error stays as it was); any other
// error as it is.
func Named(err error, what string) error {
	var over *OverError
	if !errors.As(err, &over) {
		return err
	}
	named := *over
	named.What = what
	return &named
}
