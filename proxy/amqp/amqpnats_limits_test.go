package amqp

import (
	"bytes"
	"encoding/binary"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/listen"
)

// limitedProxy is a proxy to the test broker with limits of its own.
func limitedProxy(t *testing.T, lim Limits) (p *Proxy, broker string) {
	t.Helper()
	u, err := url.Parse(testservers.Broker(t, rabbitmq.Kind))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = ListenWith(u.Host, lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, u.Host
}

// sync opens channel ch and asks basic.qos on it: once qos-ok came, the
// proxy has handled every frame sent before.
func (c *rawConn) sync(ch uint16) {
	c.t.Helper()
	c.send(methodFrameOf(ch, 20, 10, sstr("")...))
	c.expect("channel.open-ok")
	c.send(methodFrameOf(ch, 60, 10, 0, 0, 0, 0, 0, 1, 0))
	c.expect("basic.qos-ok")
}

// sendBody sends n body bytes on channel 1 in frames of 128 kB, the
// frame-max rawOpen agrees to.
func (c *rawConn) sendBody(n int) {
	for n > 0 {
		k := min(n, 128<<10-8)
		if _, err := c.Write(encodeFrame(frameBody, 1, make([]byte, k))); err != nil {
			return
		}
		n -= k
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// H2. RabbitMQ takes any number of empty body frames within a body and
// publishes the message once its bytes come; a body frame where no body
// is due is its 505. The proxy answers the same, and the empty frames
// cost it nothing (each was kept, 40 bytes, and never forwarded).
func TestAnEmptyBodyFrameIsRabbitMQs(t *testing.T) {
	p, broker := limitedProxy(t, DefaultLimits())
	empties := bytes.Repeat(encodeFrame(frameBody, 1, nil), 1<<20)
	for _, addr := range []string{broker, p.Addr()} {
		c := rawOpen(t, addr, true)
		heap := heapInUse()
		c.send(publishFrames(1), empties)
		c.sync(2)
		if grew := heapInUse() - heap; addr == p.Addr() && grew > 8<<20 {
			t.Errorf("1M empty body frames: the heap grew by %d MB", grew>>20)
		}
		c.send(encodeFrame(frameBody, 1, []byte("x")), methodFrameOf(1, 60, 10, 0, 0, 0, 0, 0, 1, 0))
		c.expect("basic.qos-ok")
		c.send(publishFrames(0), encodeFrame(frameBody, 1, nil))
		c.expect("connection.close 505 UNEXPECTED_FRAME - expected method frame, got non method frame instead")
	}
}

// H3. What a message under way holds counts as its frames arrive, and
// stays counted until it is forwarded (it was released at the next frame).
func TestABodyUnderWayStaysCounted(t *testing.T) {
	p, _ := limitedProxy(t, DefaultLimits())
	c := rawOpen(t, p.Addr(), true)
	c.send(publishFrames(4 << 20))
	c.sendBody(3 << 20)
	c.sync(2)
	if used := p.acct.Used(); used < 3<<20 {
		t.Errorf("3 MB of a body under way: %d bytes counted", used)
	}
	c.sendBody(1 << 20)
	c.send(methodFrameOf(2, 60, 10, 0, 0, 0, 0, 0, 2, 0))
	c.expect("basic.qos-ok")
	// The qos frame's own bytes are given back once the proxy wrote it
	// upstream, which races the broker's answer reaching the client: wait
	// for them (19 bytes were still counted once under load).
	deadline := time.Now().Add(5 * time.Second)
	for p.acct.Used() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if used := p.acct.Used(); used != 0 {
		t.Errorf("no message under way: %d bytes counted", used)
	}
}

// H3. A body in frames of 1 byte counts what each costs kept: the
// connection stops at its cap with 311 CONTENT_TOO_LARGE.
func TestTinyFramesStopAtTheConnectionsCap(t *testing.T) {
	p, _ := limitedProxy(t, Limits{Limits: listen.Limits{ConnBytes: 4 << 20, TotalBytes: 64 << 20, Handshake: time.Minute}})
	c := rawOpen(t, p.Addr(), true)
	one := encodeFrame(frameBody, 1, []byte("x"))
	go c.Write(append(publishFrames(8<<20), bytes.Repeat(one, 1<<20)...))
	got := lastClose(t, []byte(testutil.ReadToClose(t, c)))
	if !strings.HasPrefix(got, "connection.close 311 CONTENT_TOO_LARGE - outboxdrill amqp proxy: a message on channel 1: ") || !strings.Contains(got, "cap of 4194304 bytes for one connection") {
		t.Errorf("got %q", got)
	}
	testutil.Within(t, 5*time.Second, "the account emptied", func() {
		for p.acct.Used() != 0 {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// H3. Connections each under their cap stop at the proxy's, all
// connections together.
func TestConnectionsStopAtTheTotalCap(t *testing.T) {
	p, _ := limitedProxy(t, Limits{Limits: listen.Limits{ConnBytes: 4 << 20, TotalBytes: 6 << 20, Handshake: time.Minute}})
	a, b := rawOpen(t, p.Addr(), true), rawOpen(t, p.Addr(), true)
	a.send(publishFrames(8 << 20))
	a.sendBody(3 << 20)
	a.sync(2)
	b.send(publishFrames(8 << 20))
	go b.sendBody(3 << 20)
	got := lastClose(t, []byte(testutil.ReadToClose(t, b)))
	if !strings.HasPrefix(got, "connection.close 311 CONTENT_TOO_LARGE") || !strings.Contains(got, "cap of 6291456 bytes for all its connections at once") {
		t.Errorf("got %q", got)
	}
}

// M5. channel_max is RabbitMQ's: past the negotiated number of open
// channels a channel.open is its 530, and a frame on a channel never
// opened its 504, from the proxy as from the server; a half-sent message
// on each channel counts against the connection's cap.
func TestChannelMaxIsRabbitMQs(t *testing.T) {
	p, broker := limitedProxy(t, DefaultLimits())
	for _, addr := range []string{broker, p.Addr()} {
		c := rawOpenTuned(t, addr, true, 3, 0)
		c.sync(2)
		c.sync(3)
		c.send(methodFrameOf(4, 20, 10, sstr("")...))
		c.expect("connection.close 530 NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)")
		c = rawOpen(t, addr, false)
		c.send(methodFrameOf(7, 60, 10, 0, 0, 0, 0, 0, 1, 0))
		c.expect("connection.close 504 CHANNEL_ERROR - expected 'channel.open'")
	}
}

// M5. Half-sent messages on many channels add up against the
// connection's cap.
func TestHalfSentMessagesAddUp(t *testing.T) {
	p, _ := limitedProxy(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 64 << 20, Handshake: time.Minute}})
	c := rawOpenTuned(t, p.Addr(), false, 2047, 0)
	var b []byte
	for ch := uint16(1); ch <= 2000; ch++ {
		pub := publishFrames(1)
		binary.BigEndian.PutUint16(pub[1:3], ch)
		binary.BigEndian.PutUint16(pub[len(pub)-8-14+1:], ch) // the header frame's channel
		b = append(append(b, methodFrameOf(ch, 20, 10, sstr("")...)...), pub...)
	}
	go c.Write(b)
	got := lastClose(t, []byte(testutil.ReadToClose(t, c)))
	if !strings.HasPrefix(got, "connection.close 311 CONTENT_TOO_LARGE") {
		t.Errorf("2000 half-sent messages: got %q", got)
	}
}

// L5. A frame announcing 0xFFFFFFFF bytes is refused in its own size.
func TestAHugeFrameIsRefusedInItsSize(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	c.Write(append(append([]byte(nil), protocolHeader...), frameMethod, 0, 0, 0xff, 0xff, 0xff, 0xff))
	want := "connection.close 501 FRAME_ERROR - a frame of 4294967303 bytes is over the frame-max of 67108872"
	if got := lastClose(t, []byte(testutil.ReadToClose(t, c))); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// L1. A client that does not finish its handshake is cut at
// Limits.Handshake, and its slot is free.
func TestTheHandshakeIsTimed(t *testing.T) {
	p, _ := limitedProxy(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 1 << 20, Handshake: time.Second, Idle: time.Minute}})
	p.ln.SetMax(1)
	start := time.Now() // the deadline runs from the accept: before the header's answer
	c := rawConnTo(t, p.Addr())
	c.send(protocolHeader)
	c.expect("connection.start")
	testutil.ReadToClose(t, c)
	if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("closed after %v, want about 1 s", d)
	}
	// The slot is free once the connection's goroutines ended, a moment
	// after the client saw the close: a new client gets connection.start,
	// not the cap's 530.
	testutil.Within(t, 5*time.Second, "the slot freed", func() {
		for {
			n := rawConnTo(t, p.Addr())
			n.send(protocolHeader)
			got, _ := n.read()
			n.Close()
			if got == "connection.start" {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// L1. Once open, a connection is cut only when nothing crossed it for
// twice the heartbeat: heartbeats keep it; silence past it ends it.
func TestIdleIsTwiceTheHeartbeat(t *testing.T) {
	p, _ := limitedProxy(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 1 << 20, Handshake: time.Minute, Idle: time.Hour}})
	c := rawOpenTuned(t, p.Addr(), true, 2047, 1)
	// The broker sends heartbeats every 0.5 s: its frames keep the
	// connection for 3 s, past twice the heartbeat.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.read(); err != nil {
			t.Fatalf("a connection with heartbeats was cut: %v", err)
		}
		c.send(encodeFrame(frameHeartbeat, 0, nil))
	}
	// A heartbeat-less connection that says nothing is cut at Idle.
	p2, _ := limitedProxy(t, Limits{Limits: listen.Limits{ConnBytes: 1 << 20, TotalBytes: 1 << 20, Handshake: time.Minute, Idle: time.Second}})
	c = rawOpenTuned(t, p2.Addr(), true, 2047, 0)
	start := time.Now()
	testutil.ReadToClose(t, c)
	if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("closed after %v, want about 1 s", d)
	}
}

// H3. A body in frames of all sizes (small ones kept in chunks) reaches
// the broker whole and in order, and the history has it.
func TestABodyInSmallFramesArrivesWhole(t *testing.T) {
	f := newFixture(t)
	c := rawOpen(t, f.proxy.Addr(), true)
	body := bytes.Repeat([]byte("0123456789"), 10000)
	pub := methodFrameOf(1, 60, 40, append(append([]byte{0, 0}, sstr("")...), append(sstr(f.queue), 0)...)...)
	hdr := append([]byte{0, 60, 0, 0}, binary.BigEndian.AppendUint64(nil, uint64(len(body)))...)
	c.send(pub, encodeFrame(frameHeader, 1, append(hdr, 0, 0)))
	for rest, k := body, 1; len(rest) > 0; k = k*3 + 1 {
		n := min(len(rest), k%9000+1)
		c.send(encodeFrame(frameBody, 1, rest[:n]))
		rest = rest[n:]
	}
	c.sync(2)
	testutil.Within(t, 10*time.Second, "the message in the queue", func() {
		for {
			m, ok, err := f.direct.Get(f.queue, true)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if !bytes.Equal(m.Body, body) {
					t.Errorf("the broker got %d bytes, not the %d sent", len(m.Body), len(body))
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	if used := f.proxy.acct.Used(); used != 0 {
		t.Errorf("%d bytes still counted", used)
	}
}
