package nats

import (
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// Limits is what one proxy lets a client make it keep and how long it may
// hold a slot. Each proxy is given its own (ListenWith); tests lower them
// on the proxy they build. Of the shared listen.Limits:
//
//   - ConnBytes bounds what the proxy remembers of one connection's
//     operations, on the proxy's account: the publishes awaiting their
//     reply (reply subject and subject, cloned, never the control line
//     they came in) and the subscriptions (subject and sid), each with a
//     fixed cost for its entry. nats.go keeps at most 4,000 async
//     publishes in flight, a few hundred bytes each. Past it a publish's
//     reply is passed on unpaired (Proxy.Unpaired) and a subscription goes
//     on to the server without the proxy remembering it (an injected
//     error's failure reply cannot reach it).
//   - TotalBytes bounds the same for all the proxy's connections at once.
//   - Handshake bounds the time from accept to the client's CONNECT, as
//     nats-server's auth_timeout bounds it (and answers it the same:
//     -ERR 'Authentication Timeout'); the pgwire proxy gives a startup
//     1 min too, as here.
//   - Idle bounds the time no byte crosses a connection either way once
//     CONNECT came. nats-server PINGs every client each ping_interval
//     (2 min by default) and nats.go PINGs the server as often, so a
//     healthy client, even a consumer waiting on a quiet stream, is
//     never silent that long; a client that answers no PING is closed by
//     the server itself after two (Stale Connection). 0: no limit.
//   - Message is not used: a control line and its payload are counted as
//     they arrive, within MaxControlLine and the server's max_payload.
type Limits struct {
	listen.Limits
	// MaxPending and MaxSubs bound the entries, whatever their bytes.
	MaxPending, MaxSubs int
	// PendingAge is how long a publish's record waits for its reply. NATS
	// promises no reply to a PUB: a JetStream PubAck comes within the
	// client's own timeout (nats.go: 5 s) or the client gave up on it; a
	// plain request may never be answered. Past it the record is dropped
	// and a late reply passes on unpaired. A reply a trigger holds is
	// given up at ReplyWait first, never dropped here.
	PendingAge time.Duration
	// ReplyWait bounds the wait behind a held reply (0: ReplyWait).
	ReplyWait time.Duration
	// MaxOtherEvents bounds the events kept of operations the history
	// does not read (0: MaxOtherEvents).
	MaxOtherEvents int64
}

// DefaultLimits are the limits Listen gives a proxy.
func DefaultLimits() Limits {
	return Limits{
		Limits: listen.Limits{
			ConnBytes:   8 << 20,
			TotalBytes:  256 << 20,
			Handshake:   time.Minute,
			Idle:        10 * time.Minute,
			RecordBytes: fault.MaxRecordBytes,
		},
		MaxPending:     MaxPending,
		MaxSubs:        MaxSubs,
		PendingAge:     time.Minute,
		ReplyWait:      ReplyWait,
		MaxOtherEvents: MaxOtherEvents,
	}
}

// entryCost is what an entry of the proxy's books costs besides its
// strings: its struct, its map slot, its list element.
const entryCost = 160
