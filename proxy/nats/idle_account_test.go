package nats

import (
	"fmt"
	"testing"

	"github.com/outboxdrill/runner/proxy/listen"
)

// The idle book holds its entries in bytes on the proxy's account, as a
// connection's books do: a settled delivery and an answered pull give
// theirs back; a delivery past the book's share makes it blind (no
// evidence again, everything given back); a pull past it is not noted.
func TestIdleBookIsBoundInBytes(t *testing.T) {
	sub := func(i int) string { return fmt.Sprintf("$JS.ACK.S.C.1.%d.%d.1.0.0", i, i) }
	acct := listen.NewAccount(3*idleCost(sub(1)), 1<<20)
	b := &idleBook{acct: acct.Conn()}
	b.delivered(sub(1), 1)
	b.delivered(sub(2), 1)
	if got := acct.Used(); got != 2*idleCost(sub(1)) {
		t.Fatalf("two deliveries held: the account holds %d bytes, want %d", got, 2*idleCost(sub(1)))
	}
	b.acked(sub(1), OpAckAck)
	b.acked(sub(1), OpAckAck) // again: nothing more given back
	if got := acct.Used(); got != idleCost(sub(2)) {
		t.Fatalf("one settled: the account holds %d bytes, want %d", got, idleCost(sub(2)))
	}
	b.pulled("_INBOX.a") // noted: its reply subject is on the account too
	b.delivered(sub(3), 1)
	b.delivered(sub(4), 1)
	if !b.blind || b.held != nil {
		t.Fatalf("a delivery past the book's share: blind %v, %d held; want blind, none kept", b.blind, len(b.held))
	}
	if got := acct.Used(); got != idleCost("_INBOX.a") {
		t.Fatalf("blind: the account holds %d bytes, want only the noted pull's %d", got, idleCost("_INBOX.a"))
	}
	full := &idleBook{acct: listen.NewAccount(idleCost("_INBOX.b")-1, 1<<20).Conn()}
	full.pulled("_INBOX.b")
	if len(full.pulls) != 0 {
		t.Fatal("a pull past the book's share was noted")
	}
}

// A delivery handed twice (the duplicate fault) is held until both copies
// are settled: the first ack does not make the client look idle.
func TestIdleBookCountsCopies(t *testing.T) {
	b := &idleBook{}
	b.pulled("_INBOX.c")
	b.delivered("$JS.ACK.S.C.1.1.1.1.0.0", 2)
	b.acked("$JS.ACK.S.C.1.1.1.1.0.0", OpAckNext)
	if len(b.held) != 1 || b.asked {
		t.Fatalf("one copy of two settled: %d held, asked %v; want it still held, no ask", len(b.held), b.asked)
	}
	b.acked("$JS.ACK.S.C.1.1.1.1.0.0", OpAckNext)
	if len(b.held) != 0 || !b.asked {
		t.Fatalf("both copies settled with +NXT: %d held, asked %v; want none held, asked", len(b.held), b.asked)
	}
}
