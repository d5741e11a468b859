package listen

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Meter counts the bytes a proxy's clients make it hold, every byte as it
// arrives (or as the proxy builds something from it), each connection
// within its cap and all of them within the proxy's: unlike Budget, which
// counts only large messages, a flood of small frames or of remembered
// lines is counted too. A proxy gets its caps as configuration.
type Meter struct {
	perConn, total int64
	used           atomic.Int64
}

// NewMeter is a meter of perConn bytes a connection and total bytes for
// all of them (each at least 1).
func NewMeter(perConn, total int64) *Meter {
	return &Meter{perConn: max(perConn, 1), total: max(total, 1)}
}

// Used is what all connections hold now.
func (m *Meter) Used() int64 { return m.used.Load() }

func (m *Meter) take(n int64) bool {
	for {
		used := m.used.Load()
		if used+n > m.total {
			return false
		}
		if m.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// Conn is a new connection's share of the meter (nil m: a share that
// counts nothing, for a peer the proxy trusts).
func (m *Meter) Conn() *ConnMeter {
	if m == nil {
		return nil
	}
	return &ConnMeter{m: m}
}

// ConnMeter is one connection's share of a Meter. Its readers take as
// bytes arrive and give back once they are gone; Close (from any
// goroutine) gives back everything and takes nothing more, so that a
// reader still running after the close cannot take what would never come
// back.
type ConnMeter struct {
	m      *Meter
	mu     sync.Mutex
	used   int64
	closed bool
}

// Take counts n more bytes, or says which cap they would go over (nothing
// taken then).
func (c *ConnMeter) Take(n int64) error {
	if c == nil || n <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return &MeterError{N: n, Closed: true}
	case c.used+n > c.m.perConn:
		return &MeterError{N: n, Conn: true, Cap: c.m.perConn, Held: c.used}
	case !c.m.take(n):
		return &MeterError{N: n, Cap: c.m.total, Held: c.m.used.Load()}
	}
	c.used += n
	return nil
}

// Give gives back n bytes, never more than the connection holds (a double
// give cannot lend another connection bytes still in use).
func (c *ConnMeter) Give(n int64) {
	if c == nil || n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n = min(n, c.used)
	c.used -= n
	c.m.used.Add(-n)
}

// Held is what the connection holds now.
func (c *ConnMeter) Held() int64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Close gives back all the connection holds, for good.
func (c *ConnMeter) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.used.Add(-c.used)
	c.used, c.closed = 0, true
}

// MeterError says what a connection would hold went over a cap.
type MeterError struct {
	N         int64
	Conn      bool // the connection's cap, else the proxy's for all of them
	Closed    bool // the connection is closing
	Cap, Held int64
}

func (e *MeterError) Error() string {
	switch {
	case e.Closed:
		return "the connection is closing"
	case e.Conn:
		return fmt.Sprintf("%d more bytes would take the connection over the proxy's cap of %d bytes for one connection (it holds %d)", e.N, e.Cap, e.Held)
	}
	return fmt.Sprintf("%d more bytes would take the proxy over its cap of %d bytes for all its connections at once (%d in use)", e.N, e.Cap, e.Held)
}
