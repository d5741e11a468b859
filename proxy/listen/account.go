package listen

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Limits is what one proxy lets its clients cost: the memory they make it
// hold and how long they may keep a slot without a word. Each proxy is
// given its own (a test lowers them on the proxy it builds, never through
// a package variable every proxy reads).
type Limits struct {
	// ConnBytes bounds what one connection makes the proxy hold at once:
	// the bytes of its messages that arrived, and what the proxy built
	// from them (inflated record batches, decoded entries).
	ConnBytes int64
	// TotalBytes bounds the same for all the proxy's connections together,
	// so that MaxConns connections at ConnBytes each cannot add up.
	TotalBytes int64
	// Handshake bounds the time from accept to the end of the client's
	// handshake (for a protocol without one, its first whole message): a
	// connection that says nothing holds a slot only that long.
	Handshake time.Duration
	// Idle bounds the time between a client's messages while the proxy
	// owes it nothing (no request in flight).
	Idle time.Duration
	// Message bounds the time from a message's first byte to its last: a
	// client that announces a large message and trickles it holds its
	// bytes only that long.
	Message time.Duration
}

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

// Take takes n more bytes; false when the connection or the proxy would go
// over its cap (or the connection closed): the caller refuses what needed
// them.
func (c *ConnAccount) Take(n int64) bool {
	if c == nil || n <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.used+n > c.a.perConn || !c.a.take(n) {
		return false
	}
	c.used += n
	return true
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

// Tab opens a tab on the connection's account.
func (c *ConnAccount) Tab() *Tab { return &Tab{c: c} }

// Take takes n bytes for the message; false: the caps are reached.
func (t *Tab) Take(n int64) bool {
	if t == nil {
		return true
	}
	if !t.c.Take(n) {
		return false
	}
	t.n.Add(max(n, 0))
	return true
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

// OverError says a client's message (or what the proxy built of it) would
// take the proxy over an account's cap.
type OverError struct {
	What      string // "a message of 1048576 bytes", "inflated record batches"
	Conn      bool   // the connection's cap (else the proxy's, all connections)
	Cap, Held int64
}

func (e *OverError) Error() string {
	if e.Conn {
		return fmt.Sprintf("%s: over the proxy's cap of %d bytes for one connection (it holds %d)", e.What, e.Cap, e.Held)
	}
	return fmt.Sprintf("%s: over the proxy's cap of %d bytes for all its connections at once (%d in use)", e.What, e.Cap, e.Held)
}

// Over is the error for what would not fit on c's account: which cap it
// hit, as far as the figures now tell.
func (c *ConnAccount) Over(what string, n int64) error {
	if c == nil {
		return &OverError{What: what}
	}
	held := c.Held()
	if held+n > c.a.perConn {
		return &OverError{What: what, Conn: true, Cap: c.a.perConn, Held: held}
	}
	return &OverError{What: what, Cap: c.a.total, Held: c.a.Used()}
}
