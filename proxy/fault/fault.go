// Package fault is the one grammar of a fault, from a scenario's text to
// the proxy that strikes it: Parse reads a trigger and its action once
// (parse.go), Compile turns it once into what one broker's proxy arms, in
// that broker's dialect, or why that proxy does not take it (dialect.go),
// and a Trigger says which crossings it counts (crossing.go). It also
// holds what the protocol proxies share: the action, and the armed
// trigger that counts its boundary's crossings, strikes once and tells
// its waiters how it went.
package fault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Do is what a fault does at its boundary.
type Do int

const (
	// Kill calls Action.Kill while the reply is held: the service never
	// sees it. Then the proxy closes the connection.
	Kill Do = iota + 1
	// Cut closes the service's connection instead of passing the reply.
	Cut
	// Error makes the boundary fail for real (each proxy says how).
	Error
	// Delay holds the reply for Action.Delay, then passes it.
	Delay
	// Duplicate makes the boundary's message cross twice: a publish
	// reaches the broker twice (a relay's retry at the wire), a delivery
	// reaches the client twice. Each proxy applies it only where it is
	// exact on its protocol (Unclassifiable elsewhere); Hold does not.
	Duplicate
	// Drop swallows the reply (or the delivery): it never reaches the
	// client, and the connection stays open, as after a lost packet the
	// client cannot see. Each proxy applies it (Hold does not): what else
	// on the connection still flows is the protocol's to say.
	Drop
)

// Neutral reports whether d is an action each proxy applies on its own
// (Duplicate, Drop) rather than through Hold: a proxy that does not know
// it must refuse it when it is armed.
func (d Do) Neutral() bool { return d == Duplicate || d == Drop }

// doNames are the actions' names as the scenario language writes them
// (do:), in the order messages list them: the one table the parser, the
// messages, explore's --actions and the reference read.
var doNames = []struct {
	do   Do
	name string
}{{Kill, "kill"}, {Cut, "cut"}, {Error, "error"}, {Delay, "delay"}, {Duplicate, "duplicate"}, {Drop, "drop"}}

// ActionNames are the actions' names: kill, cut, error, delay, duplicate,
// drop.
func ActionNames() []string {
	out := make([]string, len(doNames))
	for i, n := range doNames {
		out[i] = n.name
	}
	return out
}

func (d Do) String() string {
	for _, n := range doNames {
		if n.do == d {
			return n.name
		}
	}
	return fmt.Sprintf("Do(%d)", int(d))
}

// Action is a fault's action with what it needs.
type Action struct {
	Do    Do
	Delay time.Duration // for Delay
	// Kill stops the service whose connection this is (e.g. SIGKILL of its
	// process group); required for Kill.
	Kill func() error
}

// Never is the action of a trigger that only counts (Spec.Watch, the
// runner's observers): its nth is never reached, and were it reached, a
// nanosecond's hold changes nothing the service could tell.
var Never = Action{Do: Delay, Delay: time.Nanosecond}

func (a Action) String() string {
	if a.Do == Delay {
		return "delay(" + a.Delay.String() + ")"
	}
	return a.Do.String()
}

// Check says what an action lacks.
func (a Action) Check() error {
	switch a.Do {
	case Kill:
		if a.Kill == nil {
			return errors.New("a kill needs the function that kills the service")
		}
	case Delay:
		if a.Delay <= 0 {
			return errors.New("a delay needs a positive duration")
		}
	case Cut, Error, Duplicate, Drop:
	default:
		return fmt.Errorf("unknown action %v", a.Do)
	}
	return nil
}

// Unclassifiable is the error of a trigger whose boundary crossed a proxy
// in a form it cannot attribute exactly. The fault is then NOT applied: a
// drill skips rather than approximate.
type Unclassifiable struct{ Reason string }

func (e *Unclassifiable) Error() string { return "cannot classify the boundary exactly: " + e.Reason }

// Armed is a trigger waiting on a proxy: it strikes at the Nth crossing it
// is shown, once.
type Armed struct {
	Action
	Nth   int // 1 = the first crossing; 0 counts as 1
	mu    sync.Mutex
	seen  int
	fired bool
	// struck is when it fired: a service's history splits there (what it
	// does after a fault is a retry, not a second pass of the same work).
	struck time.Time
	err    error
	done   chan struct{}
	// counted is closed at the first crossing the trigger counts: a
	// service's ready: {on: …} waits for it on a trigger that never
	// strikes.
	counted chan struct{}
}

// NewArmed arms an action for the Nth crossing.
func NewArmed(a Action, nth int) (*Armed, error) {
	if err := a.Check(); err != nil {
		return nil, err
	}
	return &Armed{Action: a, Nth: nth, done: make(chan struct{}), counted: make(chan struct{})}, nil
}

// Counted is closed once the trigger counted its first crossing (before
// it struck there, if it does).
func (a *Armed) Counted() <-chan struct{} { return a.counted }

// ErrRetired is the Err of a trigger given up by Retire.
var ErrRetired = errors.New("retired: it counts no more crossings")

// Retire gives up a trigger that has not struck: the proxy counts nothing
// more for it (a waiting database trigger makes its proxy ask the server
// what each transaction wrote; one whose wait is over should not).
func (a *Armed) Retire() { a.Fail(ErrRetired) }

// Done is closed once the trigger struck or could not be applied.
func (a *Armed) Done() <-chan struct{} { return a.done }

// Wait waits for Done or the context.
func (a *Armed) Wait(ctx context.Context) error {
	select {
	case <-a.done:
		return a.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fired reports whether the fault struck.
func (a *Armed) Fired() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.fired }

// Err is why the fault could not be applied (an *Unclassifiable, or what
// went wrong while striking), nil otherwise.
func (a *Armed) Err() error { a.mu.Lock(); defer a.mu.Unlock(); return a.err }

// Holding reports whether the trigger struck with a delay and still holds
// the reply: it fired, and its delay has not run out.
func (a *Armed) Holding() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.fired || a.Do != Delay {
		return false
	}
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// Waiting reports whether the trigger may still strike.
func (a *Armed) Waiting() bool { a.mu.Lock(); defer a.mu.Unlock(); return !a.fired && a.err == nil }

// Take counts one crossing and reports whether this is the one to strike.
func (a *Armed) Take() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired || a.err != nil {
		return false
	}
	a.seen++
	if a.seen == 1 {
		close(a.counted)
	}
	if a.seen < max(a.Nth, 1) {
		return false
	}
	a.fired = true
	a.struck = time.Now()
	return true
}

// StruckAt is when the trigger struck; zero while it has not.
func (a *Armed) StruckAt() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.struck }

// Finish records how the strike went and wakes the waiters.
func (a *Armed) Finish(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil && a.err == nil {
		a.err = err
	}
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}

// Fail gives up on a trigger that has not struck.
func (a *Armed) Fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired || a.err != nil {
		return
	}
	a.err = err
	close(a.done)
}

// Hold applies a kill, cut or delay with the reply held. closeConn closes
// the service's connection; pass forwards the reply (after a delay). It
// reports whether the connection goes on.
func (a *Armed) Hold(closed <-chan struct{}, closeConn func(), pass func() bool) bool {
	switch a.Do {
	case Kill:
		var err error
		if kerr := a.Kill(); kerr != nil {
			err = fmt.Errorf("kill: %w", kerr)
		}
		a.Finish(err)
		closeConn()
		return false
	case Cut:
		a.Finish(nil)
		closeConn()
		return false
	case Delay:
		select {
		case <-time.After(a.Delay):
		case <-closed:
			a.Finish(fmt.Errorf("the connection closed during the %v delay", a.Delay))
			return false
		}
	case Duplicate, Drop:
		// The proxy's own to apply: one that hands them here did not, and
		// the reply passes as it came rather than approximate.
		a.Finish(fmt.Errorf("this proxy does not apply %v here", a.Do))
	}
	a.Finish(nil)
	return pass()
}

// Registry keeps a proxy's armed triggers and the events it saw, safe for
// its connections to share.
type Registry[A interface {
	comparable
	Waiting() bool
}, E Sized] struct {
	mu    sync.Mutex
	armed []A
	// events are kept in chunks of eventChunk: an append never copies the
	// events before it (one slice doubling copied the whole record, a
	// large part of what an unarmed proxy did per message), and the
	// collector never meets a large slice of pointers being moved.
	events [][]E
	n      int // the events kept
	// bytes is what the kept events hold (Sized); dropped counts those
	// left out once the bound (0: MaxRecordBytes) was reached.
	bytes, dropped, bound int64
}

// MaxRecordBytes bounds what one proxy keeps of the traffic it relayed
// (each event's payloads, fields and headers, as Sized says, plus
// eventOverhead). A client in a loop of large publishes (the server keeping
// none of them) or of reads would otherwise grow the runner without bound.
// 64 MB holds a drill's history many times over (300,000 events of 200
// bytes); past it events are dropped and counted (Dropped), a strike is
// always kept, and the history that rests on the record is not judged.
const MaxRecordBytes = 64 << 20

// Bound sets what the record keeps, in bytes (listen.Limits.RecordBytes;
// 0 or less: MaxRecordBytes, so that a limit left unset is never weaker
// than the default). A proxy sets it at construction, before it records.
func (r *Registry[A, E]) Bound(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bound = max(n, 0)
}

// eventOverhead is what an event costs beyond what Sized counts: its
// struct, its slot in the record, its small strings.
const eventOverhead = 256

// Sized is an event that says how many bytes it keeps alive (decoded
// structures counted as they sit in memory), and whether it must be kept
// whatever the budget (a trigger's strike).
type Sized interface {
	RecordSize() (bytes int, keep bool)
}

// Add arms a trigger.
func (r *Registry[A, E]) Add(a A) { r.mu.Lock(); r.armed = append(r.armed, a); r.mu.Unlock() }

// Disarm removes a trigger that has not struck; it then never will.
func (r *Registry[A, E]) Disarm(a A) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.armed {
		if x == a {
			r.armed = append(r.armed[:i:i], r.armed[i+1:]...)
			return
		}
	}
}

// Waiting returns the triggers that may still strike, in arming order.
func (r *Registry[A, E]) Waiting() []A {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []A
	for _, a := range r.armed {
		if a.Waiting() {
			out = append(out, a)
		}
	}
	return out
}

// Record appends an event, unless the record is full (Bound).
func (r *Registry[A, E]) Record(e E) {
	b, keep := e.RecordSize() // E is Sized: no interface, no copy of e on the heap
	n := int64(eventOverhead) + int64(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	limit := r.bound
	if limit == 0 {
		limit = MaxRecordBytes
	}
	if r.bytes+n > limit && !keep {
		r.dropped++
		return
	}
	r.bytes += n
	if r.n%eventChunk == 0 {
		r.events = append(r.events, make([]E, 0, eventChunk))
	}
	last := len(r.events) - 1
	r.events[last] = append(r.events[last], e)
	r.n++
}

// eventChunk is how many events one chunk of the record holds.
const eventChunk = 512

// Dropped is how many events the record left out, full.
func (r *Registry[A, E]) Dropped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

// Events returns the events so far, in order.
func (r *Registry[A, E]) Events() []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]E, 0, r.n)
	for _, c := range r.events {
		out = append(out, c...)
	}
	return out
}
