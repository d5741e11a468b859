package nats

import (
	"strings"
	"sync"
	"time"

	"github.com/outboxdrill/runner/proxy/listen"
)

// The proxy's idle evidence (IdlePoll, broker.Idler): whether its clients
// asked JetStream for new work while holding none, and got none.
//
// The rule. A client holds a delivery (a MSG with a $JS.ACK reply subject
// passed on to it) until it settles it on the wire: +ACK, +NXT, -NAK or
// +TERM to that subject, forwarded to the server (+WPI keeps it held). A
// client asked for new work holding none when, with nothing held on any
// connection of the proxy,
//   - it sent a pull request ($JS.API.CONSUMER.MSG.NEXT.…) or a +NXT, or
//   - the server answered a pull it sent with a status and no message:
//     404 (no messages), 408 (the pull expired) or 100 Idle Heartbeat (the
//     pull is open and nothing came for it).
//
// Any delivery after that takes the evidence back: the pull got work.
// While both hold — asked holding none, nothing delivered since — the
// client is still waiting on the server with nothing in hand, so IdlePoll
// is the moment it is read: a long-poll that is still open is a poll
// still answered "none" (nats.js's consume() sends its next pull once
// the loop finished the message before, and the pull stays open for 30 s:
// a send time would always precede the ack that was the last change).
//
// What it rests on, and cannot see:
//   - That a client asks for more only once it finished what it held: a
//     sequential loop (nats.js's iterator, a Fetch loop). A client that
//     acks first and works after, on a pull it sent on receipt (a callback
//     handing messages to workers), looks idle while it works; settling
//     then sees its open transaction (sysrun.Live.InTx), not the moment
//     between its ack and its BEGIN.
//   - "Got none" is the proxy's view: a message the server sent that the
//     proxy has not read yet is not seen. Settling does not end on this
//     alone: on JetStream it also reads every consumer's lag (undelivered
//     and unacknowledged, broker.Lagging) in the same look, and waits
//     while any is not 0 — a message in flight is unacknowledged there.
//   - Push consumers send no pulls: no evidence, the whole quiet window is
//     waited. So for AckNone consumers (their deliveries are never
//     settled on the wire), and for a client holding a delivery it never
//     settles (one lost with its connection after the proxy passed it on
//     stays held; one a fault kept from the client is not held).
//   - Client-side buffering is seen only as held deliveries: a client
//     that prefetches gives evidence once it settled all it was handed and
//     the server answered its open pull with a status.
//
// Past MaxHeld deliveries held at once, or past what the book's share of
// the proxy's memory account allows (each entry costs its subject and
// entryCost, as the connections' books do: the pulls' reply subjects come
// from the clients), the proxy stops keeping them and gives no evidence
// again (the whole window is waited); a pull it cannot note is only no
// status evidence.
type idleBook struct {
	acct *listen.ConnAccount // its share of the proxy's account; nil: none kept
	mu   sync.Mutex
	// held counts the deliveries of each $JS.ACK subject handed to a
	// client and not settled: a duplicate fault hands one twice, and the
	// client settles each copy.
	held map[string]int
	// pulls are the reply subjects of the pulls forwarded, whose status
	// answer may tell "none" (at most MaxConsumerAPIReplies).
	pulls map[string]bool
	asked bool // asked for new work holding none; nothing delivered since
	blind bool // held overflowed MaxHeld: no evidence from here on
}

// MaxHeld bounds the deliveries the proxy keeps as held (a client's
// prefetch buffer, or an AckNone consumer's deliveries, which are never
// settled): past it the proxy no longer tells idle polls.
const MaxHeld = 1 << 14

// pulled notes a pull request forwarded to the server, reply its reply
// subject.
func (b *idleBook) pulled(reply string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.held) == 0 {
		b.asked = true
	}
	if reply != "" && !b.pulls[reply] && len(b.pulls) < MaxConsumerAPIReplies && b.acct.Take(idleCost(reply)) == nil {
		if b.pulls == nil {
			b.pulls = map[string]bool{}
		}
		b.pulls[strings.Clone(reply)] = true
	}
}

// acked notes an ack of kind (ackKind) forwarded to the server on subject.
func (b *idleBook) acked(subject, kind string) {
	switch kind {
	case OpAckAck, OpAckNext, OpAckNak, OpAckTerm:
	default:
		return // +WPI: still at work on it; "": the server ignores it
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch n := b.held[subject]; {
	case n > 1:
		b.held[subject] = n - 1
	case n == 1:
		delete(b.held, subject)
		b.acct.Release(idleCost(subject))
	}
	if kind == OpAckNext && len(b.held) == 0 {
		b.asked = true // +NXT asks for the next one
	}
}

// delivered notes a delivery handed to the client copies times (0: a
// fault kept it from the client, 2: the duplicate fault's): either way
// the pull got work, and the evidence goes.
func (b *idleBook) delivered(ackSubject string, copies int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = false
	if copies == 0 || b.blind {
		return
	}
	if n := b.held[ackSubject]; n > 0 {
		b.held[ackSubject] = n + copies // handed again before it was settled
		return
	}
	if len(b.held) >= MaxHeld || b.acct.Take(idleCost(ackSubject)) != nil {
		for s := range b.held {
			b.acct.Release(idleCost(s))
		}
		b.blind, b.held = true, nil
		return
	}
	if b.held == nil {
		b.held = map[string]int{}
	}
	b.held[strings.Clone(ackSubject)] = copies
}

// status notes a status message the server sent on subject: on a pull's
// reply subject, 404, 408 and an idle heartbeat say it has nothing for
// the pull. m is read only when subject is a pull's.
func (b *idleBook) status(subject string, m *msg) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.pulls[subject] || m.hdr == 0 || len(m.data()) > 0 {
		return
	}
	h := parseHeader(m.header())
	switch {
	case h.Status == "404" || h.Status == "408":
		delete(b.pulls, subject) // that pull is over; the next re-adds it
		b.acct.Release(idleCost(subject))
	case h.Status == "100" && strings.HasPrefix(h.Description, "Idle Heartbeat"):
	default:
		return
	}
	if len(b.held) == 0 {
		b.asked = true
	}
}

// IdlePoll is the latest moment the proxy's clients were known to have
// asked JetStream for new work holding none, and got none (the rule
// above): now, while they still wait so; zero when they hold a delivery,
// got one since they asked, or never asked (broker.Idler).
func (p *Proxy) IdlePoll() time.Time {
	b := &p.idle
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blind || !b.asked || len(b.held) > 0 {
		return time.Time{}
	}
	return time.Now()
}

// idleCost is what one entry of the idle book costs the account.
func idleCost(subject string) int64 { return entryCost + int64(len(subject)) }
