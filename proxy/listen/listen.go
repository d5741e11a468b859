// Package listen is the part every protocol proxy shares: a loopback
// listener that serves each connection on its own goroutine, keeps the live
// ones, and on Close stops accepting, closes them all and waits.
package listen

import (
	"net"
	"sync"
)

// Conn is a served connection the listener can close.
type Conn interface{ Close() }

// Listener accepts on 127.0.0.1 at a port of the kernel's choosing.
type Listener struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  map[Conn]struct{}
	nextID int
	closed bool
	wg     sync.WaitGroup
}

// Serve starts accepting; for each connection, open builds its Conn
// (numbered from 1 in accept order) and serve runs it.
func Serve(open func(id int, c net.Conn) Conn, serve func(Conn)) (*Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Listener{ln: ln, conns: map[Conn]struct{}{}}
	l.wg.Add(1)
	go l.accept(open, serve)
	return l, nil
}

// Addr is the listener's "host:port".
func (l *Listener) Addr() string { return l.ln.Addr().String() }

func (l *Listener) accept(open func(int, net.Conn) Conn, serve func(Conn)) {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			nc.Close()
			return
		}
		l.nextID++
		c := open(l.nextID, nc)
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			serve(c)
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
		}()
	}
}

// Accepted is how many connections the listener has taken so far.
func (l *Listener) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextID
}

// Close stops accepting, closes every live connection and waits for them.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := make([]Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	err := l.ln.Close()
	for _, c := range conns {
		c.Close()
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
