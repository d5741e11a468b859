package pgwire

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Boundary is the protocol event a trigger waits for.
type Boundary int

const (
	// Commit is the reply to a COMMIT of a transaction that wrote the
	// trigger's table (any table when Table is empty).
	Commit Boundary = iota + 1
	// Statement is the reply to a batch of statements (a simple query, or
	// an extended-protocol batch up to its Sync) that wrote the table
	// inside a transaction block.
	Statement
)

func (b Boundary) String() string {
	switch b {
	case Commit:
		return "commit"
	case Statement:
		return "statement"
	}
	return fmt.Sprintf("Boundary(%d)", int(b))
}

// Do is what a trigger does at its boundary.
type Do int

const (
	// Kill calls Trigger.Kill while the server's reply is held: the client
	// never sees it. Then both connections close.
	Kill Do = iota + 1
	// Cut closes the client's connection (and the server's) instead of
	// forwarding the reply.
	Cut
	// Error makes the boundary fail for real: the server rolls the
	// transaction back and the client gets an ErrorResponse with
	// InjectedSQLState.
	Error
	// Delay holds the reply for Trigger.Delay, then forwards it.
	Delay
)

func (d Do) String() string {
	switch d {
	case Kill:
		return "kill"
	case Cut:
		return "cut"
	case Error:
		return "error"
	case Delay:
		return "delay"
	}
	return fmt.Sprintf("Do(%d)", int(d))
}

// InjectedSQLState is the SQLSTATE the client sees for an injected error:
// serialization_failure, which a COMMIT really can return and which
// well-behaved clients retry.
const InjectedSQLState = "40001"

// Trigger arms one fault: at the Nth crossing of Boundary by a transaction
// (or batch) that wrote Table, do Do.
type Trigger struct {
	Boundary Boundary
	// Table is the table the transaction or statement wrote, by name or
	// schema.name; "" matches any write (and, for Commit, any commit).
	Table string
	Nth   int // 1 = the first match; 0 counts as 1
	Do    Do
	Delay time.Duration // for Delay
	// Kill stops the service whose connection this is (e.g. SIGKILL of its
	// process group). Called with the reply held; required for Do == Kill.
	Kill func() error
}

func (t Trigger) String() string {
	s := fmt.Sprintf("%s(table=%s) nth=%d do=%s", t.Boundary, t.Table, max(t.Nth, 1), t.Do)
	if t.Do == Delay {
		s += "(" + t.Delay.String() + ")"
	}
	return s
}

// matches reports whether a set of written tables matches the trigger's
// table filter.
func (t Trigger) matches(tables []string) bool {
	if t.Table == "" {
		return t.Boundary == Commit || len(tables) > 0
	}
	for _, tab := range tables {
		if strings.EqualFold(tab, t.Table) || strings.HasSuffix(strings.ToLower(tab), "."+strings.ToLower(t.Table)) {
			return true
		}
	}
	return false
}

// Unclassifiable is the error of a trigger whose boundary crossed the proxy
// in a form it cannot attribute exactly (TLS, a COMMIT inside a
// multi-statement simple query, ...). The fault is then NOT applied: a
// drill skips rather than approximate.
type Unclassifiable struct{ Reason string }

func (e *Unclassifiable) Error() string { return "cannot classify the boundary exactly: " + e.Reason }

// Armed is a trigger waiting on a proxy. Done is closed when it fired or
// failed.
type Armed struct {
	Trigger
	mu    sync.Mutex
	seen  int
	fired bool
	err   error
	done  chan struct{}
}

// Done is closed once the trigger fired or could not be applied.
func (a *Armed) Done() <-chan struct{} { return a.done }

// Fired reports whether the fault was applied.
func (a *Armed) Fired() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.fired }

// Err is why the fault could not be applied (an *Unclassifiable, or the
// error of Kill), nil otherwise.
func (a *Armed) Err() error { a.mu.Lock(); defer a.mu.Unlock(); return a.err }

// take counts one matching crossing and reports whether this is the one
// to strike. It strikes at most once.
func (a *Armed) take() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired || a.err != nil {
		return false
	}
	a.seen++
	if a.seen < max(a.Nth, 1) {
		return false
	}
	a.fired = true
	return true
}

// finish records the outcome of the strike and wakes waiters.
func (a *Armed) finish(err error) {
	a.mu.Lock()
	if err != nil {
		a.err = err
	}
	a.mu.Unlock()
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}

// fail gives up on a trigger that has not fired.
func (a *Armed) fail(err error) {
	a.mu.Lock()
	if a.fired || a.err != nil {
		a.mu.Unlock()
		return
	}
	a.err = err
	a.mu.Unlock()
	close(a.done)
}
