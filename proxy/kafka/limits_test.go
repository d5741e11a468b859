package kafka

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/proxy/fault"
)

// dial opens a raw connection to the proxy's bootstrap listener.
func (f *fixture) dial() net.Conn {
	f.t.Helper()
	c, err := net.Dial("tcp", f.proxy.Addr())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// frame is a request message: its size, header (v1) and body.
func frame(key, version int16, corr int32, body []byte) []byte {
	h := binary.BigEndian.AppendUint16(nil, uint16(key))
	h = binary.BigEndian.AppendUint16(h, uint16(version))
	h = binary.BigEndian.AppendUint32(h, uint32(corr))
	h = binary.BigEndian.AppendUint16(h, 0xffff) // no client id
	if isFlexible(key, version) {
		h = append(h, 0)
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(h)+len(body)))
	return append(append(msg, h...), body...)
}

func TestMessageOverTheCapClosesTheConnection(t *testing.T) {
	f := newFixture(t)
	var got string
	n := testutil.Allocated(func() {
		c := f.dial()
		go testutil.Flood(c, string(binary.BigEndian.AppendUint32(nil, MaxMessage+1)), "x", 1<<20)
		got = testutil.ReadToClose(t, c)
	})
	if got != "" {
		t.Errorf("got %q; a broker closes without a word", got)
	}
	if n > 16<<20 {
		t.Errorf("the attack allocated %d MB, want under 16", n>>20)
	}
}

// A message under the cap costs what arrived of it, not what it announced.
func TestMessageCostsWhatArrived(t *testing.T) {
	f := newFixture(t)
	n := testutil.Allocated(func() {
		c := f.dial()
		testutil.Flood(c, string(binary.BigEndian.AppendUint32(nil, MaxMessage-100)), "x", 1<<20)
		c.(*net.TCPConn).CloseWrite()
		testutil.ReadToClose(t, c)
	})
	if n > 16<<20 {
		t.Errorf("1 MB of a 64 MB message allocated %d MB, want under 16", n>>20)
	}
}

// A count a request announces never sizes an allocation: a Produce that
// claims two billion topics in a few bytes costs those bytes.
func TestCountsAllocateNothing(t *testing.T) {
	body := []byte{0xff, 0xff, 0, 1, 0, 0, 0, 0} // no transactional id, acks 1, timeout 0
	body = binary.BigEndian.AppendUint32(body, 1<<31-1)
	body = append(body, make([]byte, 1<<20)...)
	msg := frame(keyProduce, 8, 1, body)
	var q *request
	n := testutil.Allocated(func() { q, _ = parseRequest(msg) })
	if q == nil || q.unread == "" {
		t.Errorf("a Produce of 2^31 topics was read: %+v", q)
	}
	if n > 64<<10 {
		t.Errorf("reading it allocated %d KB, want under 64", n>>10)
	}
}

// A request over MaxEntries topics and partitions is refused unread: its
// connection closes, the broker never sees it, and the refusal is named.
func TestEntriesOverTheCapAreRefused(t *testing.T) {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks = 8, 1
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "t"
	for i := range MaxEntries + 1 {
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = int32(i)
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	up := newFakeBroker(t)
	p := up.proxy(t, DefaultLimits())
	c := dialProxy(t, p)
	c.Write(frame(keyProduce, 8, 1, req.AppendTo(nil)))
	if got := testutil.ReadToClose(t, c); got != "" {
		t.Errorf("got %q; want the connection closed", got)
	}
	if n := up.received(); n != 0 {
		t.Errorf("the broker got %d bytes; want none", n)
	}
	if ev := refusedEvent(p); !strings.Contains(ev, "names over 65536") {
		t.Errorf("the refusal is not named: %q", ev)
	}
}

// M4: a Fetch naming millions of empty topics (each costs its struct,
// none a partition) is refused at the cap, having built a bounded amount
// (a 20 MiB one built 786 MB when topics were not counted).
func TestTopicsCountAsEntries(t *testing.T) {
	body := binary.BigEndian.AppendUint32(nil, 0xffffffff) // replica id
	body = append(body, 0, 0, 0, 0, 0, 0, 0, 1)            // max wait, min bytes
	const topics = 3 << 20
	body = binary.BigEndian.AppendUint32(body, topics)
	for range topics {
		body = append(body, 0, 1, 'x', 0, 0, 0, 0) // a topic "x" of no partitions
	}
	msg := frame(keyFetch, 2, 1, body)
	var q *request
	n := testutil.Allocated(func() { q, _ = parseRequest(msg) })
	if q == nil || q.over == "" {
		t.Fatalf("a Fetch of %d topics was not refused", topics)
	}
	if n > 32<<20 {
		t.Errorf("reading a %d MB Fetch built %d MB; want under 32", len(msg)>>20, n>>20)
	}
}

func TestConnectionCap(t *testing.T) {
	f := newFixture(t)
	f.proxy.listeners[f.proxy.seed].SetMax(1)
	f.dial()
	testutil.Within(t, 10*time.Second, "the first connection served", func() {
		for f.proxy.Connections() < 1 {
			time.Sleep(time.Millisecond)
		}
	})
	c := f.dial()
	if got := testutil.ReadToClose(t, c); got != "" {
		t.Errorf("got %q; a broker over its cap closes without a word", got)
	}
}

func TestTLSFailsTheTriggers(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Cut}})
	c := f.dial()
	c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'})
	testutil.Within(t, 10*time.Second, "the trigger failing", func() { <-a.Done() })
	var u *fault.Unclassifiable
	if !errors.As(a.Err(), &u) {
		t.Errorf("err=%v; want unclassifiable", a.Err())
	}
}

// Two Produce requests sent at once: with the first's response held, the
// second never reaches the broker before the fault strikes (here: ever,
// the connection being cut).
func TestTheBarrierHoldsWhatWasPipelined(t *testing.T) {
	f := newFixture(t)
	a := f.arm(Trigger{Boundary: Reply, Op: OpPublish, Action: fault.Action{Do: fault.Cut}})
	var both []byte
	for corr, event := range []string{"e1", "e2"} {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 8, -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = f.topic
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = batchOf(event, "v")
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		both = append(both, frame(keyProduce, 8, int32(corr), req.AppendTo(nil))...)
	}
	c := f.dial()
	if _, err := c.Write(both); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ReadToClose(t, c); got != "" {
		t.Errorf("the client got %d bytes; want the connection cut before any response", len(got))
	}
	<-a.Done()
	if got := f.stored(); got != 1 {
		t.Errorf("the log ends at %d; want 1: e1 stored, e2 never sent", got)
	}
}

// TestEventSizeCountsWhatItKeeps: records count decompressed, as kept.
func TestEventSizeCountsWhatItKeeps(t *testing.T) {
	e := Event{API: "Fetch", Records: []Record{{Topic: "t", Value: make([]byte, 1<<20)}, {Topic: "t", Key: []byte("k"), Value: make([]byte, 1<<20)}}}
	if n, _ := e.RecordSize(); n < 2<<20 {
		t.Errorf("two records of 1 MB count %d bytes", n)
	}
}

// TestAHalfClosedClientIsAnsweredAsByTheBroker: a request, then the
// client's writing side shut down: through the proxy the client gets what
// the broker gives it after that EOF. The broker here answers only once it
// has read the EOF, so the answer must travel after the half-close (kfake
// itself answers such a client or not as its goroutines race: comparing
// against it failed one run in a few dozen).
func TestAHalfClosedClientIsAnsweredAsByTheBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reply := binary.BigEndian.AppendUint32(nil, 10)  // size
	reply = binary.BigEndian.AppendUint32(reply, 77) // correlation id
	reply = append(reply, 0, 0, 0, 0, 0, 0)          // ApiVersions v0: no error, no keys
	sawEOF := make(chan bool, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		_, err = io.Copy(io.Discard, c) // the request, then the client's EOF
		sawEOF <- err == nil
		c.Write(reply)
	}()
	p, err := Listen(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(frame(18, 0, 77, nil)); err != nil { // ApiVersions v0
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	got := testutil.ReadToClose(t, c)
	if !<-sawEOF {
		t.Errorf("the broker never saw the client's EOF: the proxy did not pass the half-close on")
	}
	if got != string(reply) {
		t.Errorf("through the proxy the client got %q; want the broker's answer %q, sent after the half-close", got, reply)
	}
}
