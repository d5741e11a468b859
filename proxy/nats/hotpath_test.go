package nats

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"
)

// discard is a net.Conn that takes every write: the far side of a
// connection whose relaying BenchmarkHotPath times.
type discard struct{ net.Conn }

func (discard) Write(b []byte) (int, error)      { return len(b), nil }
func (discard) Close() error                     { return nil }
func (discard) SetReadDeadline(time.Time) error  { return nil }
func (discard) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (discard) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (discard) SetDeadline(time.Time) error      { return nil }
func (discard) SetWriteDeadline(time.Time) error { return nil }
func (discard) Read([]byte) (int, error)         { select {} }

// BenchmarkHotPath is the proxy's own work for one unarmed JetStream
// publish round trip, with no network: the client's PUB read, recorded
// and forwarded, then the server's PubAck paired, recorded and passed on.
// It is what an unarmed proxy adds on top of a bare forwarder's hop.
func BenchmarkHotPath(b *testing.B) {
	p, err := Listen("127.0.0.1:1")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	c := newConn(p, 1, discard{})
	c.server, c.toServer = discard{}, bufio.NewWriterSize(discard{}, bufSize)
	pub := []byte("PUB ORDERS _INBOX.abcdefghijklmnopqrstuv.1 1\r\ne\r\n")
	pubAck := `{"stream":"ORDERS","seq":1}`
	ack := fmt.Appendf(nil, "MSG _INBOX.abcdefghijklmnopqrstuv.1 1 %d\r\n%s\r\n", len(pubAck), pubAck)
	var in, out bytes.Reader
	cr, sr := newReader(&in, false), newReader(&out, true)
	b.ReportAllocs()
	for b.Loop() {
		in.Reset(pub)
		out.Reset(ack)
		m, err := cr.next()
		if err != nil {
			b.Fatal(err)
		}
		if !c.relay(&m, false) {
			b.Fatal("relay")
		}
		if m, err = sr.next(); err != nil {
			b.Fatal(err)
		}
		if !c.fromServerOp(&m, false) {
			b.Fatal("fromServerOp")
		}
	}
	if evs := p.Events(); len(evs) < 2 || evs[1].Kind != KindReply || evs[1].Answers != evs[0].Seq {
		b.Fatalf("the PubAck was not paired with its publish: %+v", evs[:min(2, len(evs))])
	}
}
