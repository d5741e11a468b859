package listen

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// MessageBudget is what one proxy's clients may hold at once in messages
// of LargeMessage bytes or more, all their connections together: each
// connection may take up to its protocol's cap (64 MB) for one message,
// and 256 connections of those would be 16 GB (a hostile client on 20
// connections, each sending most of a 60 MB message, grew the runner to
// 2.4 GB). What a message costs in memory is up to twice its size while it
// is read (a buffer grows by doubling), so 128 MB holds two messages at the
// cap at once, at about 256 MB. Smaller messages are not counted: 256 of
// them are 256 MB at most.
const MessageBudget = 128 << 20

// LargeMessage is the size from which a message counts against the budget.
const LargeMessage = 1 << 20

// messageBudget is MessageBudget as NewMessageBudget reads it: tests lower it.
var messageBudget int64 = MessageBudget

// SetMessageBudget sets the budget new proxies get, for a test, which
// restores it.
func SetMessageBudget(n int64) (restore func()) {
	old := messageBudget
	messageBudget = n
	return func() { messageBudget = old }
}

// NewMessageBudget is a proxy's budget: MessageBudget.
func NewMessageBudget() *Budget { return NewBudget(messageBudget) }

// Budget is a proxy's MessageBudget, shared by its connections.
type Budget struct{ left atomic.Int64 }

// NewBudget is a budget of n bytes.
func NewBudget(n int64) *Budget {
	b := &Budget{}
	b.left.Store(n)
	return b
}

func (b *Budget) take(n int64) bool {
	for {
		left := b.left.Load()
		if left < n {
			return false
		}
		if b.left.CompareAndSwap(left, left-n) {
			return true
		}
	}
}

// Hold is one connection's share of a Budget: the large messages it is
// reading or holding now. A nil Hold (a server's side) takes nothing.
type Hold struct {
	b      *Budget
	mu     sync.Mutex // the reader adds, a close from another goroutine releases
	n      int64
	closed bool // Close ran: nothing more is taken (it would never come back)
}

// Hold is a new connection's share of b (nil b: no budget).
func (b *Budget) Hold() *Hold {
	if b == nil {
		return nil
	}
	return &Hold{b: b}
}

// Add takes n more bytes for the message being read, when it is large;
// false when the budget has not that much left (the message is refused).
func (h *Hold) Add(n int64) bool {
	if h == nil || n < LargeMessage {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || !h.b.take(n) {
		return false
	}
	h.n += n
	return true
}

// Release gives back what the connection held: before its next message,
// and when it closes.
func (h *Hold) Release() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.b.left.Add(h.n)
	h.n = 0
}

// Close gives back what the connection held, for good: a reader still
// running when its connection closed takes nothing more.
func (h *Hold) Close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.b.left.Add(h.n)
	h.n, h.closed = 0, true
}

// ErrBudget says a large message was refused for the budget.
func ErrBudget(n int64) error {
	return fmt.Errorf("a message of %d bytes: the proxy's %d MB for large messages of all its connections at once is in use", n, MessageBudget>>20)
}
