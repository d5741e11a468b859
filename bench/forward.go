package bench

import (
	"io"
	"net"
	"sync"
)

// forwarder is a bare TCP forwarder: bytes each way, nothing parsed, no
// record, no fault. Beside a protocol proxy in the same run it is the
// floor a userland hop costs, so a proxy's figure is read against it
// rather than against the direct round trip alone.
type forwarder struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

// forward listens on a loopback port and relays every connection to upstream.
func forward(upstream string) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &forwarder{ln: ln, upstream: upstream}
	f.wg.Go(f.accept)
	return f, nil
}

func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", f.upstream)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, u)
		f.mu.Unlock()
		for _, pair := range [][2]net.Conn{{u, c}, {c, u}} {
			f.wg.Go(func() {
				_, _ = io.Copy(pair[0], pair[1])
				pair[0].Close() // one side gone: so is the link
				pair[1].Close()
			})
		}
	}
}

// Close stops listening and ends every link.
func (f *forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}
