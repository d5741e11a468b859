package amqp

import (
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
)

// Limits is what one proxy lets a client cost (ListenWith gives each
// proxy its own; tests lower them on the proxy they build):
//
//   - ConnBytes bounds what one connection makes the proxy hold of the
//     messages it is sending, counted on the proxy's account as their
//     frames arrive: every frame kept until its message is whole and
//     forwarded (a frame of a few bytes costs its slice besides), the body
//     assembled from them, and a fixed cost per message under way (a
//     half-sent message on each of a connection's channels). A message at
//     MaxContent in frames of the usual frame-max fits: its frames and its
//     body, twice MaxContent.
//   - TotalBytes bounds the same for all the proxy's connections at once.
//     Past either cap the connection is closed with 311
//     CONTENT_TOO_LARGE ("the client attempted to transfer content larger
//     than the server could accept at the present time",
//     https://www.rabbitmq.com/amqp-0-9-1-reference#constants).
//   - Handshake bounds the time from accept to the server's
//     connection.open-ok reaching the client: a client that idles in the
//     handshake holds a slot that long. RabbitMQ's own handshake_timeout
//     is 10 s; PostgreSQL's authentication_timeout (the pgwire proxy's
//     Handshake) is 1 min, as here.
//   - Idle bounds the time no byte crosses a connection either way while
//     the client turned heartbeats off (heartbeat 0 in
//     connection.tune-ok). With heartbeats on, the limit is twice the
//     negotiated interval: each peer sends a heartbeat at least that
//     often when it has nothing else to send, and RabbitMQ itself
//     considers a peer dead after two missed ones
//     (https://www.rabbitmq.com/docs/heartbeats). A consumer waiting on a
//     quiet queue still gets heartbeats, so it is never cut; a client
//     with heartbeats off that is silent for this long is taken for gone.
//     0: no limit with heartbeats off.
//   - Message is not used: a message's frames may come as slowly as its
//     client sends them, each counted as it arrives.
type Limits struct {
	listen.Limits
	// ReplyWait bounds the wait behind a held answer (0: ReplyWait).
	ReplyWait time.Duration
	// MaxOtherEvents bounds the events kept of methods the history does
	// not read (0: MaxOtherEvents).
	MaxOtherEvents int64
}

// DefaultLimits are the limits Listen gives a proxy.
func DefaultLimits() Limits {
	return Limits{
		Limits: listen.Limits{
			ConnBytes:   2*MaxContent + 8<<20,
			TotalBytes:  4 * MaxContent,
			Handshake:   time.Minute,
			Idle:        10 * time.Minute,
			RecordBytes: fault.MaxRecordBytes,
		},
		ReplyWait:      ReplyWait,
		MaxOtherEvents: MaxOtherEvents,
	}
}

// unitCost is what a message under way costs besides its frames: the
// unit, its method's decoded arguments and its content header, counted
// so that a half-sent message on each of thousands of channels adds up
// against ConnBytes.
const unitCost = 1024

// frameSlot is what keeping one frame (or one chunk of small frames)
// costs besides its bytes: its slice in the unit's list, which grows by
// doubling (and the list it outgrew is garbage until collected).
const frameSlot = 72
