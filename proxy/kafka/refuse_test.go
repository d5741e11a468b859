package kafka

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/internal/testutil"
)

// H4: an API key kmsg does not know is refused, never forwarded (kfake
// dereferenced nil on key 999 and the run lost its broker): the
// connection closes, as a broker closes one whose request it cannot read,
// and the refusal is named.
func TestUnknownAPIKeyIsRefused(t *testing.T) {
	up := newFakeBroker(t)
	p := up.proxy(t, DefaultLimits())
	for _, msg := range [][]byte{frame(999, 0, 1, nil), frame(keyProduce, 99, 1, nil), frame(-1, 0, 1, nil)} {
		c := dialProxy(t, p)
		c.Write(msg)
		if got := testutil.ReadToClose(t, c); got != "" {
			t.Errorf("got %q; want the connection closed", got)
		}
	}
	if n := up.received(); n != 0 {
		t.Errorf("the broker got %d bytes of refused requests", n)
	}
	if ev := refusedEvent(p); !strings.Contains(ev, "unknown API key 999") {
		t.Errorf("the refusal is not named: %q", ev)
	}
}

// An ApiVersions of an unknown version gets the broker's answer:
// UNSUPPORTED_VERSION at v0, with the versions the proxy knows.
func TestUnknownApiVersionsVersionIsAnswered(t *testing.T) {
	up := newFakeBroker(t)
	p := up.proxy(t, DefaultLimits())
	c := dialProxy(t, p)
	c.Write(frame(keyApiVersions, 99, 42, nil))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := readFull(c, size[:]); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	msg := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := readFull(c, msg); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrApiVersionsResponse()
	if err := resp.ReadFrom(msg[4:]); err != nil || binary.BigEndian.Uint32(msg) != 42 {
		t.Fatalf("%v; correlation %d", err, binary.BigEndian.Uint32(msg))
	}
	if resp.ErrorCode != errUnsupportedVersion || len(resp.ApiKeys) != 1 || resp.ApiKeys[0].ApiKey != keyApiVersions {
		t.Errorf("answer %+v; want UNSUPPORTED_VERSION and ApiVersions' versions", resp)
	}
	if n := up.received(); n != 0 {
		t.Errorf("the broker got %d bytes", n)
	}
}

// A broker's offer is kept to what the proxy knows: a client that follows
// it is never refused.
func TestApiVersionsOfferIsClamped(t *testing.T) {
	r := kmsg.NewPtrApiVersionsResponse()
	r.ApiKeys = []kmsg.ApiVersionsResponseApiKey{{ApiKey: keyProduce, MaxVersion: 999}, {ApiKey: 999, MaxVersion: 3}, {ApiKey: keyFetch, MaxVersion: 4}}
	if !clampVersions(r) || len(r.ApiKeys) != 2 || r.ApiKeys[0].MaxVersion != kmsg.NewPtrProduceRequest().MaxVersion() || r.ApiKeys[1].MaxVersion != 4 {
		t.Errorf("clamped to %+v", r.ApiKeys)
	}
}

// addOffsetsToTxn is an AddOffsetsToTxn v0 of a transactional id.
func addOffsetsToTxn(id string) []byte {
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.Group = id, "g"
	return frame(keyAddOffsetsToTxn, 0, 1, req.AppendTo(nil))
}

func (p *Proxy) openTxns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.txns)
}

// M3: transactions whose EndTxn never comes are kept at most MaxConnTxns
// per connection, and forgotten when it closes (one entry per id, kept
// for ever, grew the runner by 368 MB).
func TestTransactionsCappedPerConnectionAndEvicted(t *testing.T) {
	up := newFakeBroker(t)
	p := up.proxy(t, DefaultLimits())
	c := dialProxy(t, p)
	for i := range 200 {
		if _, err := c.Write(addOffsetsToTxn(strings.Repeat("x", 1000) + string(rune('a'+i%26)) + strings.Repeat("y", i))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Within(t, 10*time.Second, "the requests forwarded", func() {
		for up.received() == 0 {
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(100 * time.Millisecond)
	if n := p.openTxns(); n > MaxConnTxns {
		t.Errorf("%d transactions kept for one connection; want at most %d", n, MaxConnTxns)
	}
	c.Close()
	testutil.Within(t, 10*time.Second, "the transactions forgotten", func() {
		for p.openTxns() != 0 || p.Held() != 0 {
			time.Sleep(time.Millisecond)
		}
	})
}

// L1: a connection that never sends a request, and one that stalls in
// the middle of one, are closed at their deadlines, and their slot serves
// the next client; one awaiting a response is not idle.
func TestHandshakeAndMessageTimeoutsFreeTheSlot(t *testing.T) {
	up := newFakeBroker(t)
	lim := DefaultLimits()
	lim.Handshake, lim.Idle, lim.Message = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	p := up.proxy(t, lim)
	ln := p.listeners[p.seed]
	ln.SetMax(1)
	silent := dialProxy(t, p)
	start := time.Now()
	testutil.ReadToClose(t, silent)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a silent connection closed after %v; want the handshake's 300ms", d)
	}
	time.Sleep(100 * time.Millisecond) // the listener lets go of the slot just after the close
	stalled := dialProxy(t, p)
	stalled.Write(append(binary.BigEndian.AppendUint32(nil, 1000), 0, 18, 0, 0))
	start = time.Now()
	testutil.ReadToClose(t, stalled)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stalled request closed after %v; want the message's 300ms", d)
	}
	time.Sleep(100 * time.Millisecond)
	waiting := dialProxy(t, p)
	waiting.Write(frame(keyApiVersions, 0, 1, nil)) // the fake broker never answers
	waiting.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := waiting.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("a connection owed a response was closed: %v", err)
	}
	if ln.Refused() != 0 || ln.Accepted() != 3 {
		t.Errorf("accepted %d, refused %d; want every connection served in turn, the slot freed", ln.Accepted(), ln.Refused())
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(interface{ Timeout() bool })
	return ok && ne.Timeout()
}
