package listen

import (
	"bufio"
	"net"
	"sync"
	"time"
)

// Pair is a relayed connection: the client's, and the one the proxy
// opens to the server for it, closed together. What goes to the client
// goes through one buffered writer under a lock, since both directions'
// goroutines may answer the client (a relayed reply, an injected error).
type Pair struct {
	Client net.Conn
	// Done is closed once the pair is closing: a goroutine waiting on a
	// held reply gives up.
	Done chan struct{}

	serverMu sync.Mutex
	server   net.Conn
	out      *bufio.Writer
	outMu    sync.Mutex
	once     sync.Once
}

// NewPair starts a pair for an accepted client connection.
func NewPair(client net.Conn) *Pair {
	return &Pair{Client: client, Done: make(chan struct{}), out: bufio.NewWriterSize(client, 64<<10)}
}

// Dial connects to the server (see Dial).
func (p *Pair) Dial(addr string) (net.Conn, error) {
	if err := Dial(addr, p.Done, &p.serverMu, &p.server); err != nil {
		return nil, err
	}
	return p.server, nil
}

// Close closes both sides, once.
func (p *Pair) Close() {
	p.once.Do(func() {
		close(p.Done)
		p.Client.Close()
		p.serverMu.Lock()
		if p.server != nil {
			p.server.Close()
		}
		p.serverMu.Unlock()
	})
}

// Write sends bytes to the client, flushing when asked; false once the
// client is gone.
func (p *Pair) Write(b []byte, flush bool) bool {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if _, err := p.out.Write(b); err != nil {
		return false
	}
	return !flush || p.out.Flush() == nil
}

// Writer is the client side as an io.Writer (each write flushed), for a
// direction relayed blindly.
func (p *Pair) Writer() ClientWriter { return ClientWriter{p} }

// ClientWriter writes to a pair's client.
type ClientWriter struct{ p *Pair }

func (w ClientWriter) Write(b []byte) (int, error) {
	if !w.p.Write(b, true) {
		return 0, net.ErrClosed
	}
	return len(b), nil
}

// Await is a connection's barrier behind a held reply: it waits until the
// reply was handled (answered closes), and reports whether the connection
// goes on. A reply that has not come within limit is given up if forget
// takes it back from where it was awaited (the caller fails its trigger
// there); if forget cannot, the reply is being handled, and Await waits
// for it.
func (p *Pair) Await(answered <-chan struct{}, limit time.Duration, forget func() bool) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-answered:
		return true
	case <-p.Done:
		return false
	case <-t.C:
	}
	if forget() {
		return true
	}
	select {
	case <-answered:
		return true
	case <-p.Done:
		return false
	}
}
