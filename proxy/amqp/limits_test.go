package amqp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
)

// dial opens a raw connection to the proxy.
func (f *fixture) dial() net.Conn {
	f.t.Helper()
	c, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// lastClose reads the frames a peer sent and returns the last one's
// method with its reply code and text ("" when none is a close).
func lastClose(t *testing.T, b []byte) string {
	t.Helper()
	var got string
	for len(b) >= 8 {
		n := int(binary.BigEndian.Uint32(b[3:7]))
		if len(b) < n+8 {
			break
		}
		if m, err := parseMethod(b[7 : 7+n]); err == nil && b[0] == frameMethod && strings.HasSuffix(m.name(), ".close") {
			got = fmt.Sprintf("%s %d %s", m.name(), m.replyCode, m.replyText)
		}
		b = b[n+8:]
	}
	return got
}

func TestFrameOverTheCapIsAFrameError(t *testing.T) {
	f := newFixture(t)
	var got string
	n := testutil.Allocated(func() {
		c := f.dial()
		head := append([]byte(nil), protocolHeader...)
		head = append(head, frameMethod, 0, 0)
		head = binary.BigEndian.AppendUint32(head, MaxFrame+1)
		go testutil.Flood(c, string(head), "x", 1<<20)
		got = testutil.ReadToClose(t, c)
	})
	if want := "connection.close 501 FRAME_ERROR - a frame of 67108873 bytes is over the frame-max of 67108872"; lastClose(t, []byte(got)) != want {
		t.Errorf("got %q, want %q", lastClose(t, []byte(got)), want)
	}
	if n > 16<<20 {
		t.Errorf("the attack allocated %d MB, want under 16", n>>20)
	}
}

// A frame under the cap costs what arrived of it, not what it announced.
func TestFrameCostsWhatArrived(t *testing.T) {
	f := newFixture(t)
	n := testutil.Allocated(func() {
		c := f.dial()
		head := append([]byte(nil), protocolHeader...)
		head = append(head, frameBody, 0, 1)
		head = binary.BigEndian.AppendUint32(head, MaxFrame-100)
		testutil.Flood(c, string(head), "x", 1<<20)
		c.(*net.TCPConn).CloseWrite()
		testutil.ReadToClose(t, c)
	})
	if n > 16<<20 {
		t.Errorf("1 MB of a 64 MB frame allocated %d MB, want under 16", n>>20)
	}
}

func TestMessageOverTheCapClosesItsChannel(t *testing.T) {
	f := newFixture(t)
	_, ch := f.client()
	notified := onClose(ch)
	if err := ch.Publish("", f.queue, false, false, amqp.Publishing{Body: make([]byte, MaxContent+1)}); err != nil {
		t.Fatal(err)
	}
	e := closed(t, notified)
	if e == nil || e.Code != 406 || !strings.Contains(e.Reason, "message size 67108865 is larger than configured max size 67108864") {
		t.Fatalf("channel closed with %v", e)
	}
}

func TestAnotherProtocolIsRelayedBlindly(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Cut}})
	c := f.dial()
	c.Write([]byte("AMQP\x00\x01\x00\x00")) // AMQP 1.0
	if got := testutil.ReadToClose(t, c); got != string(protocolHeader) {
		t.Errorf("got %q; want RabbitMQ's own header", got)
	}
	testutil.Within(t, 10*time.Second, "the trigger failing", func() { <-a.Done() })
	var u *fault.Unclassifiable
	if !errors.As(a.Err(), &u) {
		t.Errorf("err=%v; want unclassifiable", a.Err())
	}
}

func TestConnectionCap(t *testing.T) {
	f := newFixture(t)
	f.proxy.ln.SetMax(1)
	f.client()
	c := f.dial()
	c.Write(protocolHeader)
	if got, want := lastClose(t, []byte(testutil.ReadToClose(t, c))), "connection.close 530 NOT_ALLOWED - outboxdrill amqp proxy: too many client connections (cap 1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFrameReaderHoldsTheFrameMax(t *testing.T) {
	var max atomic.Int64
	max.Store(4096 - 8)
	frame := encodeFrame(frameBody, 1, make([]byte, 4096-7))
	if _, err := newFrameReader(bytes.NewReader(frame), &max).next(); err == nil || !strings.Contains(err.Error(), "501 FRAME_ERROR") {
		t.Errorf("a frame over frame-max: %v", err)
	}
	frame = encodeFrame(frameBody, 1, make([]byte, 4096-8))
	if _, err := newFrameReader(bytes.NewReader(frame), &max).next(); err != nil {
		t.Errorf("a frame of frame-max: %v", err)
	}
}

// TestEventSizeCountsWhatItKeeps: a headers table counts as decoded, an
// array of 60,000 void fields as 60,000 values (16 bytes each), not as
// the 60 kB it took on the wire.
func TestEventSizeCountsWhatItKeeps(t *testing.T) {
	e := Event{Body: make([]byte, 1000), Properties: &Properties{Headers: map[string]any{"a": make([]any, 60000)}}}
	if n, _ := e.RecordSize(); n < 1000+60000*16 {
		t.Errorf("a table of 60,000 voids counts %d bytes", n)
	}
}

// TestATableDecodesABoundedNumberOfFields: 100,000 void fields (1 byte
// each on the wire, 16 decoded) make the table malformed, not 1.6 MB of
// values per 100 kB sent; a table within the bound decodes.
func TestATableDecodesABoundedNumberOfFields(t *testing.T) {
	table := func(voids int) []byte {
		arr := append([]byte{'A', 0, 0, 0, 0}, bytes.Repeat([]byte{'V'}, voids)...)
		binary.BigEndian.PutUint32(arr[1:5], uint32(voids))
		body := append([]byte{1, 'a'}, arr...)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	d := decoder{b: table(100000)}
	if d.table(0); !d.bad {
		t.Error("100,000 fields decoded")
	}
	d = decoder{b: table(1000)}
	if tb := d.table(0); d.bad || len(tb["a"].([]any)) != 1000 {
		t.Errorf("1,000 fields: bad %v, %v", d.bad, len(tb))
	}
}

// TestAHalfClosedClientGetsItsReplies: the protocol header, then the
// client's writing side shut down: connection.start still comes (the proxy
// closed both ways at its EOF).
func TestAHalfClosedClientGetsItsReplies(t *testing.T) {
	f := newFixture(t)
	c := f.dial()
	if _, err := io.WriteString(c, "AMQP\x00\x00\x09\x01"); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got := testutil.ReadToClose(t, c)
	// A method frame (type 1) on channel 0 whose payload begins with
	// class 10 (connection), method 10 (start).
	if len(got) < 11 || got[0] != 1 || got[7:11] != "\x00\x0a\x00\x0a" {
		t.Errorf("got %q, want connection.start", got[:min(len(got), 16)])
	}
}

// A small body costs about its size: its only frame is kept as it came
// (no chunk), and a body in frames of a byte takes a few chunks growing
// to fit it, not a 64 KB chunk per message.
func TestSmallBodiesCostTheirSize(t *testing.T) {
	p, err := Listen("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client, other := net.Pipe()
	defer other.Close()
	c := newConn(p, 1, client)
	for _, size := range []int{1, 1000} {
		u := &unit{frames: [][]byte{{}, {}}, hdr: &contentHeader{bodySize: uint64(size)}}
		body := bytes.Repeat([]byte("e"), size)
		for i := range body {
			raw := encodeFrame(frameBody, 1, body[i:i+1])
			f := frame{typ: frameBody, channel: 1, raw: raw, payload: raw[7:8], cost: int64(len(raw))}
			u.got++
			if err := c.keep(u, f, fromServer, 0); err != nil {
				t.Fatal(err)
			}
		}
		kept := 0
		var got []byte
		for _, b := range u.frames[2:] {
			kept += cap(b)
			got = appendPayloads(got, b)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("%d bytes in frames of one: kept %q", size, got)
		}
		// 9 wire bytes a byte, in chunks at most doubling: under 2×.
		if kept > 2*9*size+16 || len(u.frames)-2 > 5 {
			t.Errorf("a body of %d bytes in frames of one kept %d bytes in %d slices, want under %d in at most 5", size, kept, len(u.frames)-2, 2*9*size+16)
		}
	}
}
