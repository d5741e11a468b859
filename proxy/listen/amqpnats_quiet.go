package listen

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Quiet ends a connection across which no byte went either way for its
// limit: a client that holds a slot saying nothing, while a healthy one
// sends (or is sent) its protocol's keepalives within it (AMQP
// heartbeats, NATS PING/PONG). The limit may change as the protocol
// negotiates it (AMQP's heartbeat comes in connection.tune-ok); 0 is none.
type Quiet struct {
	last   atomic.Int64 // unix nanoseconds of the last byte read either way
	limit  atomic.Int64 // nanoseconds; 0: no limit
	fire   func()
	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

// NewQuiet watches a connection: fire runs once the limit passed with no
// byte (it closes the connection).
func NewQuiet(limit time.Duration, fire func()) *Quiet {
	q := &Quiet{fire: fire}
	q.last.Store(time.Now().UnixNano())
	q.limit.Store(int64(limit))
	q.mu.Lock()
	q.timer = time.AfterFunc(max(limit, time.Hour), q.check)
	q.mu.Unlock()
	q.arm()
	return q
}

// Touch says bytes went across.
func (q *Quiet) Touch() {
	if q != nil {
		q.last.Store(time.Now().UnixNano())
	}
}

// SetLimit changes the limit (0: none), counted from the last byte.
func (q *Quiet) SetLimit(d time.Duration) {
	if q == nil {
		return
	}
	q.limit.Store(int64(max(d, 0)))
	q.arm()
}

// Stop ends the watch (the connection closed).
func (q *Quiet) Stop() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.timer.Stop()
}

// arm sets the timer to when the limit passes, if no byte comes first.
func (q *Quiet) arm() {
	q.mu.Lock()
	defer q.mu.Unlock()
	limit := time.Duration(q.limit.Load())
	if q.closed || limit <= 0 {
		return
	}
	q.timer.Reset(time.Until(time.Unix(0, q.last.Load()).Add(limit)))
}

// check fires when the limit passed since the last byte, else waits on.
func (q *Quiet) check() {
	limit := time.Duration(q.limit.Load())
	if limit <= 0 {
		return
	}
	if time.Since(time.Unix(0, q.last.Load())) < limit {
		q.arm()
		return
	}
	q.mu.Lock()
	closed := q.closed
	q.closed = true
	q.mu.Unlock()
	if !closed {
		q.fire()
	}
}

// Reader is r, touching q with every byte read.
func (q *Quiet) Reader(r io.Reader) io.Reader { return quietReader{r, q} }

type quietReader struct {
	r io.Reader
	q *Quiet
}

func (r quietReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		r.q.Touch()
	}
	return n, err
}
