package nats

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	brokerjs "github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
)

// limitedProxy is a proxy to the test server with limits of its own.
func limitedProxy(t *testing.T, lim Limits) *Proxy {
	t.Helper()
	u, err := url.Parse(testservers.Broker(t, brokerjs.Kind))
	if err != nil {
		t.Fatal(err)
	}
	p, err := ListenWith(u.Host, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// connected dials the proxy, reads its INFO and sends CONNECT.
func connected(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	f := &fixture{t: t, proxy: p}
	c, _ := f.dial()
	if _, err := io.WriteString(c, "CONNECT {\"verbose\":false}\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// pong sends PING and waits for the PONG: the proxy has handled every
// operation sent before.
func pong(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var got []byte
	for b := make([]byte, 64<<10); !strings.HasSuffix(string(got), "PONG\r\n"); {
		n, err := c.Read(b)
		if err != nil {
			t.Fatalf("after %q: %v", got[max(0, len(got)-200):], err)
		}
		got = append(got, b[:n]...)
	}
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// flood sends n operations made by op, and syncs.
func flood(t *testing.T, c net.Conn, n int, op func(i int) string) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		b.WriteString(op(i))
		if b.Len() > 1<<20 || i == n-1 {
			if _, err := io.WriteString(c, b.String()); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	pong(t, c)
}

// M1. Unanswered publishes' records are bounded per connection in bytes
// (each kept its whole control line) and given back when it closes.
func TestUnansweredPublishesAreBounded(t *testing.T) {
	lim := DefaultLimits()
	lim.RecordBytes = 1 << 20 // the history's own bound aside
	p := limitedProxy(t, lim)
	c := connected(t, p)
	reply := strings.Repeat("r", 3000)
	heap := heapInUse()
	flood(t, c, 20000, func(i int) string { return fmt.Sprintf("PUB nobody.listens %s.%d 0\r\n\r\n", reply, i) })
	if grew := heapInUse() - heap; grew > 24<<20 {
		t.Errorf("20,000 unanswered publishes of 3 kB lines: the heap grew by %d MB", grew>>20)
	}
	if used := p.acct.Used(); used > DefaultLimits().ConnBytes || p.Unpaired() == 0 {
		t.Errorf("%d bytes held, %d unpaired", used, p.Unpaired())
	}
	c.Close()
	testutil.Within(t, 5*time.Second, "the books given back", func() {
		for p.acct.Used() != 0 {
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// M1. A publish's record waits PendingAge for its reply, then goes.
func TestAnUnansweredPublishAges(t *testing.T) {
	lim := DefaultLimits()
	lim.PendingAge = 200 * time.Millisecond
	p := limitedProxy(t, lim)
	c := connected(t, p)
	flood(t, c, 10, func(i int) string { return fmt.Sprintf("PUB nobody.listens r.%d 0\r\n\r\n", i) })
	time.Sleep(300 * time.Millisecond)
	flood(t, c, 1, func(i int) string { return "PUB nobody.listens r.last 0\r\n\r\n" })
	want := int64(entryCost + len("r.last") + len("nobody.listens"))
	if used := p.acct.Used(); used != want || p.Unpaired() != 10 {
		t.Errorf("%d bytes held, %d unpaired; want %d (one record) and 10", used, p.Unpaired(), want)
	}
}

// M2. SUB lines are bounded per connection in bytes, and given back on
// UNSUB.
func TestSubscriptionsAreBounded(t *testing.T) {
	lim := DefaultLimits()
	lim.RecordBytes = 1 << 20 // the history's own bound aside
	p := limitedProxy(t, lim)
	c := connected(t, p)
	subject := strings.Repeat("s", 3000)
	heap := heapInUse()
	flood(t, c, 20000, func(i int) string { return fmt.Sprintf("SUB %s.%d %d\r\n", subject, i, i) })
	if grew := heapInUse() - heap; grew > 24<<20 {
		t.Errorf("20,000 SUB lines of 3 kB: the heap grew by %d MB", grew>>20)
	}
	if used := p.acct.Used(); used > DefaultLimits().ConnBytes {
		t.Errorf("%d bytes held", used)
	}
	flood(t, c, 20000, func(i int) string { return fmt.Sprintf("UNSUB %d\r\n", i) })
	if used := p.acct.Used(); used != 0 {
		t.Errorf("every subscription gone: %d bytes held", used)
	}
}

// L1. A client that sends no CONNECT is cut at Limits.Handshake with
// nats-server's own words, and its slot is free.
func TestTheHandshakeIsTimed(t *testing.T) {
	lim := DefaultLimits()
	lim.Handshake = time.Second
	p := limitedProxy(t, lim)
	p.ln.SetMax(1)
	f := &fixture{t: t, proxy: p}
	c, _ := f.dial()
	start := time.Now()
	if got := testutil.ReadToClose(t, c); got != "-ERR 'Authentication Timeout'\r\n" {
		t.Errorf("got %q", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %v, want about 1 s", d)
	}
	c.Close()
	// The slot is free once the refusal's linger ended: a new client
	// gets the server's INFO, not the cap's -ERR.
	testutil.Within(t, 5*time.Second, "the slot freed", func() {
		for {
			nc, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 5)
			_, err = io.ReadFull(nc, b)
			nc.Close()
			if err == nil && string(b) == "INFO " {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// L1. After CONNECT a client is cut only when nothing crossed its
// connection for Limits.Idle: its PINGs keep it.
func TestIdleIsNothingEitherWay(t *testing.T) {
	lim := DefaultLimits()
	lim.Idle = time.Second
	p := limitedProxy(t, lim)
	c := connected(t, p)
	for range 6 {
		time.Sleep(400 * time.Millisecond)
		pong(t, c)
	}
	start := time.Now()
	testutil.ReadToClose(t, c)
	if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("closed after %v, want about 1 s", d)
	}
}

// M1, M2. An event keeps no part of its control line: its op was a slice
// of it, and kept every 4 kB line of 65,536 events alive.
func TestAnEventKeepsNoLine(t *testing.T) {
	rd := newReader(strings.NewReader("SUB "+strings.Repeat("s", 4000)+" 1\r\n"), false)
	m, err := rd.next()
	if err != nil {
		t.Fatal(err)
	}
	if m.op != "SUB" || unsafe.StringData(m.op) != unsafe.StringData(ops["SUB"]) {
		t.Errorf("op %q is not the constant", m.op)
	}
}
