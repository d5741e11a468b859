// Package listen is the part every protocol proxy shares: a loopback
// listener that serves each connection on its own goroutine, keeps the live
// ones, refuses clients over its cap in the protocol's own words, and on
// Close stops accepting, closes them all and waits.
//
// Every proxy goes through it, so that no client can make a proxy open
// connections without bound (each one may open one to the upstream server
// and costs buffers of its own).
package listen

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// MaxConns is how many client connections one proxy serves at once by
// default. It is above PostgreSQL's default max_connections (100), so that a
// service the server would accept is never refused by the proxy first, and
// above the pools drilled services open (pgx's pgxpool max(4, CPUs),
// node-postgres 10, go-redis 10 per CPU, opened as needed); it bounds what
// idle connections cost a proxy to a few tens of MB.
const MaxConns = 256

const (
	// refuseTimeout bounds how long a refused client has to send what the
	// protocol reads before refusing (a PostgreSQL startup message) and to
	// read the refusal.
	refuseTimeout = 5 * time.Second
	// maxRefusing bounds the refusals under way: past it, a client over the
	// cap is closed without a word, so that a flood of connections costs
	// no more than a bounded number of goroutines.
	maxRefusing = 64
)

// Conn is a served connection the listener can close.
type Conn interface{ Close() }

// Protocol is what a proxy tells the listener.
type Protocol struct {
	// Open builds the Conn of an accepted connection (numbered from 1 in
	// accept order).
	Open func(id int, c net.Conn) Conn
	// Serve runs it.
	Serve func(Conn)
	// Refuse answers a client over the cap, in the protocol's own words
	// (Redis: "-ERR max number of clients reached"; PostgreSQL: an
	// ErrorResponse with SQLSTATE 53300), with a deadline set on c. The
	// listener then closes c. Required: a client must learn why.
	Refuse func(c net.Conn, max int)
}

// Listener accepts on 127.0.0.1 at a port of the kernel's choosing.
type Listener struct {
	ln       net.Listener
	proto    Protocol
	mu       sync.Mutex
	conns    map[Conn]struct{}
	refusing map[net.Conn]struct{}
	max      int
	nextID   int
	refused  int
	closed   bool
	slots    *Slots // shared with other listeners, nil for none
	wg       sync.WaitGroup
}

// Serve starts accepting for a protocol, with the cap at MaxConns.
func Serve(p Protocol) (*Listener, error) {
	if p.Open == nil || p.Serve == nil || p.Refuse == nil {
		return nil, errors.New("listen: a protocol needs Open, Serve and Refuse (a client over the cap must learn why)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Listener{ln: ln, proto: p, conns: map[Conn]struct{}{}, refusing: map[net.Conn]struct{}{}, max: MaxConns}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the listener's "host:port".
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Slots is a cap shared by listeners whose connections all end up at one
// server: the PostgreSQL proxies of every service of a run, whose
// upstream connections count against that server's max_connections
// together (each proxy's own cap of 256 is above the 200 of the runner's
// own server, and several proxies share it).
type Slots struct {
	mu        sync.Mutex
	used, max int
}

// NewSlots is a shared cap of n connections (n ≥ 1).
func NewSlots(n int) *Slots { return &Slots{max: max(n, 1)} }

func (s *Slots) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= s.max {
		return false
	}
	s.used++
	return true
}

func (s *Slots) give() {
	s.mu.Lock()
	s.used--
	s.mu.Unlock()
}

// Max is the shared cap.
func (s *Slots) Max() int { return s.max }

// ShareSlots makes the listener's connections also count against s, a
// cap it shares with other listeners; set it before clients connect.
func (l *Listener) ShareSlots(s *Slots) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.slots = s
}

// SetMax changes the cap on connections served at once (n ≥ 1); those
// served already go on.
func (l *Listener) SetMax(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = max(n, 1)
}

func (l *Listener) accept() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors (EMFILE), or the like: wait and
			// accept again, as net/http does, rather than stop serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			nc.Close()
			return
		}
		full, limit := len(l.conns) >= l.max, l.max
		if !full && l.slots != nil && !l.slots.take() {
			full, limit = true, l.slots.Max()
		}
		if full {
			l.refused++
			if len(l.refusing) >= maxRefusing {
				l.mu.Unlock()
				nc.Close()
				continue
			}
			l.refusing[nc] = struct{}{}
			l.wg.Add(1)
			l.mu.Unlock()
			go l.refuse(nc, limit)
			continue
		}
		l.nextID++
		c := l.proto.Open(l.nextID, nc)
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		slots := l.slots
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			l.proto.Serve(c)
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
			if slots != nil {
				slots.give()
			}
		}()
	}
}

// refuse lets the protocol answer a client over the cap, then closes the
// connection.
func (l *Listener) refuse(nc net.Conn, limit int) {
	defer l.wg.Done()
	nc.SetDeadline(time.Now().Add(refuseTimeout))
	l.proto.Refuse(nc, limit)
	Linger(nc, refuseTimeout)
	l.mu.Lock()
	delete(l.refusing, nc)
	l.mu.Unlock()
}

// Linger closes a client's connection after the proxy's last word (a
// refusal, a protocol error) so that the client can read it: FIN first,
// then what the client still sends is read and dropped (never kept) until
// it closes or d passes. A plain close over unread bytes would make the
// kernel reset the connection, and a client still writing (the rest of a
// message too large) would lose the answer.
func Linger(nc net.Conn, d time.Duration) {
	if tc, ok := nc.(*net.TCPConn); ok && tc.CloseWrite() == nil {
		tc.SetReadDeadline(time.Now().Add(d))
		_, _ = io.Copy(io.Discard, tc)
	}
	nc.Close()
}

// Accepted is how many connections the listener has served so far (those
// refused over the cap are not counted).
func (l *Listener) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextID
}

// Refused is how many connections were refused over the cap so far.
func (l *Listener) Refused() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// Close stops accepting, closes every live connection and waits for them.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := make([]Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	refusing := make([]net.Conn, 0, len(l.refusing))
	for nc := range l.refusing {
		refusing = append(refusing, nc)
	}
	l.mu.Unlock()
	err := l.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	for _, nc := range refusing {
		nc.Close()
	}
	l.wg.Wait()
	return err
}

// Dial connects to addr for a relayed connection and stores the result in
// *server under mu, unless done closed meanwhile (the connection is being
// closed: the new one would leak).
func Dial(addr string, done <-chan struct{}, mu *sync.Mutex, server *net.Conn) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-done:
		c.Close()
		return net.ErrClosed
	default:
		*server = c
		return nil
	}
}
