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

// HalfCloseWait bounds how long a pair whose client ended its requests
// waits for the server to answer them and close its side.
const HalfCloseWait = 10 * time.Second

// HalfClose passes a client's end of its requests on (it closed, or shut
// its writing side down, as `nc` and `printf … | redis-cli` do): the
// server's writing side is shut down too, the replies to what came before
// still reach the client, and the pair closes once the server closed its
// side (Done), or after HalfCloseWait. Closing both ways at the client's
// EOF dropped those replies. flush sends what is buffered for the server
// first.
func (p *Pair) HalfClose(flush func() error) {
	if flush != nil && flush() != nil {
		p.Close()
		return
	}
	p.serverMu.Lock()
	s := p.server
	p.serverMu.Unlock()
	ShutWrite(s, p.Done)
	p.Close()
}

// ShutWrite shuts server's writing side down and waits until done closes
// (the proxy's reading of the server ended) or HalfCloseWait passed: a
// proxy not built on Pair half-closes with it.
func ShutWrite(server net.Conn, done <-chan struct{}) {
	if tc, ok := server.(*net.TCPConn); ok && tc.CloseWrite() == nil {
		t := time.NewTimer(HalfCloseWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
}
