package nats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
)

// dial opens a raw connection to the proxy and reads the INFO it passes
// on.
func (f *fixture) dial() (net.Conn, map[string]any) {
	f.t.Helper()
	c, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var line []byte // read byte by byte: nothing after the INFO is read ahead
	for b := make([]byte, 1); !bytes.HasSuffix(line, []byte("\n")); line = append(line, b...) {
		if _, err := io.ReadFull(c, b); err != nil {
			f.t.Fatalf("after %q: %v", line, err)
		}
	}
	var info map[string]any
	if js, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "INFO "); !ok || json.Unmarshal([]byte(js), &info) != nil {
		f.t.Fatalf("the first line %q is no INFO", line)
	}
	c.SetReadDeadline(time.Time{})
	return c, info
}

func TestTheInfoNamesTheProxy(t *testing.T) {
	f := newFixture(t)
	_, info := f.dial()
	host, port, _ := net.SplitHostPort(f.proxy.Addr())
	if info["host"] != host || fmt.Sprint(info["port"]) != port {
		t.Errorf("INFO names %v:%v; want the proxy's %s", info["host"], info["port"], f.proxy.Addr())
	}
	if _, ok := info["tls_available"]; ok {
		t.Error("INFO offers TLS the proxy cannot read")
	}
	js, _, err := rewriteInfo([]byte(`{"server_id":"X","host":"10.0.0.1","port":4222,"max_payload":1048576,"connect_urls":["10.0.0.2:4222","10.0.0.3:4222"],"ws_connect_urls":["10.0.0.2:8080"],"nonce":"abc"}`), "127.0.0.1:5555")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"connect_urls":["127.0.0.1:5555"],"host":"127.0.0.1","max_payload":1048576,"nonce":"abc","port":5555,"server_id":"X"}`; string(js) != want {
		t.Errorf("rewritten INFO:\n%s\nwant\n%s", js, want)
	}
}

func TestProtocolErrorsAreTheServers(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ in, want string }{
		{"FOO\r\n", "-ERR 'Unknown Protocol Operation'\r\n"},
		{"PUB a\r\n", "-ERR 'Unknown Protocol Operation'\r\n"},
		{"PUB a x1\r\n", "-ERR 'Unknown Protocol Operation'\r\n"},
		{"HPUB a 5 2\r\n", "-ERR 'Unknown Protocol Operation'\r\n"},
		{"PUB a 2\r\nabcd\r\n", "-ERR 'Unknown Protocol Operation'\r\n"},
		{"PUB a 67108865\r\n", "-ERR 'Maximum Payload Violation'\r\n"},
		{"PUB a 99999999999999999999999\r\n", "-ERR 'Maximum Payload Violation'\r\n"},
		// What came before is answered first.
		{"PING\r\nFOO\r\n", "PONG\r\n-ERR 'Unknown Protocol Operation'\r\n"},
	} {
		c, _ := f.dial()
		if _, err := io.WriteString(c, tc.in); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ReadToClose(t, c); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A message over the server's max_payload (its INFO's) is refused at its
// control line, as the server refuses it: the proxy read 64 MB first.
func TestTheServersMaxPayloadHolds(t *testing.T) {
	f := newFixture(t)
	c, info := f.dial()
	max, ok := info["max_payload"].(float64)
	if !ok || max <= 0 || max >= MaxPayload {
		t.Skipf("the server announces max_payload %v", info["max_payload"])
	}
	if _, err := fmt.Fprintf(c, "PUB a %d\r\n", int(max)+1); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ReadToClose(t, c); got != "-ERR 'Maximum Payload Violation'\r\n" {
		t.Errorf("a payload of max_payload+1 announced: got %q", got)
	}
}

// A size announced is never allocated: only what arrived.
func TestPayloadCostsWhatArrived(t *testing.T) {
	f := newFixture(t)
	n := testutil.Allocated(func() {
		c, _ := f.dial()
		testutil.Flood(c, fmt.Sprintf("PUB a %d\r\n", MaxPayload), "x", 1<<20)
		c.(*net.TCPConn).CloseWrite()
		testutil.ReadToClose(t, c)
	})
	if n > 16<<20 {
		t.Errorf("1 MB of a 64 MB payload allocated %d MB, want under 16", n>>20)
	}
}

func TestControlLineWithoutEnd(t *testing.T) {
	f := newFixture(t)
	var got string
	n := testutil.Allocated(func() {
		c, _ := f.dial()
		go testutil.Flood(c, "PUB ", "a", 16<<20)
		got = testutil.ReadToClose(t, c)
	})
	if want := "-ERR 'Maximum Control Line Exceeded'\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if n > 8<<20 {
		t.Errorf("16 MB without a line end allocated %d MB, want under 8", n>>20)
	}
}

func TestConnectionCap(t *testing.T) {
	f := newFixture(t)
	f.proxy.ln.SetMax(1)
	f.dial()
	c, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := testutil.ReadToClose(t, c), "-ERR 'maximum connections exceeded'\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A client that starts TLS is relayed blindly, and the triggers say they
// cannot be applied.
func TestTLSFailsTheTriggers(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Cut}})
	c, _ := f.dial()
	c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'})
	testutil.Within(t, 10*time.Second, "the trigger failing", func() { <-a.Done() })
	var u *fault.Unclassifiable
	if !errors.As(a.Err(), &u) || a.Fired() {
		t.Errorf("fired=%v err=%v; want unclassifiable", a.Fired(), a.Err())
	}
}

// TestEventSizeCountsWhatItKeeps: a message's data and its header's
// fields, as decoded, count toward the record's bound.
func TestEventSizeCountsWhatItKeeps(t *testing.T) {
	fields := map[string][]string{}
	for i := range 10000 {
		fields[fmt.Sprintf("k%x", i)] = []string{""}
	}
	e := Event{Data: make([]byte, 1<<20), Header: Header{Fields: fields}}
	if n, _ := e.RecordSize(); n < 1<<20+10000*64 {
		t.Errorf("1 MB of data and 10,000 header fields count %d bytes", n)
	}
}

// TestAHalfClosedClientGetsItsReplies: a client that sends, then shuts
// its writing side down, gets the server's answers (the proxy closed both
// ways at its EOF).
func TestAHalfClosedClientGetsItsReplies(t *testing.T) {
	f := newFixture(t)
	c, _ := f.dial()
	if _, err := io.WriteString(c, "CONNECT {\"verbose\":false}\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	if got := testutil.ReadToClose(t, c); !strings.Contains(got, "PONG\r\n") {
		t.Errorf("got %q, want PONG", got)
	}
}
