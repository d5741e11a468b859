// Package broker defines what the reference pipeline needs from a message
// broker. Each broker lives in its own sub-package; Redis Streams is the first.
package broker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Message is what the relay (or a raw publish) hands to the broker: the
// business event id and the payload exactly as stored in the outbox.
type Message struct {
	EventID string
	Payload string
	// Republish marks a deliberate second publish of an event (a DLQ replay,
	// a reconciliation, a raw replay), not a relay's retry: a broker that
	// deduplicates by event id must still store it.
	Republish bool
}

// Delivery is one broker entry handed to a worker of a consumer group.
type Delivery struct {
	ID         string // broker entry id: new on every publish, names one delivery record
	EventID    string // business event id: stable across redeliveries
	Payload    string
	Deliveries int // times this entry has been delivered, this one included
}

// DeadLetter is an entry moved aside after too many failed deliveries. It
// keeps everything needed to replay it under the same event id.
type DeadLetter struct {
	EventID    string
	Payload    string
	Reason     string
	EntryID    string // the entry's id on the main stream
	Deliveries int
}

// Broker is one stream of transfer events with consumer groups, as the
// pipeline sees it. A consumer group is named by the consumer id.
type Broker interface {
	// Capabilities is what this broker can do; an operation outside it
	// returns an error wrapping ErrUnsupported.
	Capabilities() Capabilities
	// Publish appends msgs in order. It returns the ids of the messages it
	// published before any error, so a caller marks exactly those.
	Publish(ctx context.Context, msgs []Message) ([]string, error)
	// Read hands worker up to count NEW entries (count <= 0: all of them). When
	// none are new it waits at most block, never forever.
	Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]Delivery, error)
	// Claim moves up to count pending entries idle for at least minIdle to worker.
	Claim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]Delivery, error)
	// AutoClaim does the same in the broker's own scan (Redis XAUTOCLAIM), as
	// a production reclaimer does.
	AutoClaim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]Delivery, error)
	// Ack removes entries from the group's pending list.
	Ack(ctx context.Context, group string, ids ...string) error
	// Nack gives entries back for redelivery now, as a worker does after its
	// consumer transaction rolled back (AMQP basic.nack with requeue,
	// JetStream Nak). A broker without a negative acknowledgement leaves them
	// pending (Redis Streams: in the PEL, owned by the worker, until claimed).
	Nack(ctx context.Context, group string, ids ...string) error
	// Crash drops what worker holds on the client side, as the worker's
	// process dying would: its channel (RabbitMQ then requeues every
	// delivery it held unacknowledged), its message handles (JetStream). What
	// the server keeps stays as the server keeps it.
	Crash(ctx context.Context, group, worker string) error
	// DeadLetter appends to the dead-letter stream; the caller acks the entry.
	DeadLetter(ctx context.Context, dl DeadLetter) error
	// DeadLetters lists the dead-letter stream; TakeDeadLetters empties it
	// and returns what it held.
	DeadLetters(ctx context.Context) ([]DeadLetter, error)
	TakeDeadLetters(ctx context.Context) ([]DeadLetter, error)

	// Trim drops all but the newest keep entries, as a retention limit or a
	// broker that lost data would; it returns how many it dropped.
	Trim(ctx context.Context, keep int) (int64, error)

	// Entries counts the entries in the stream.
	Entries(ctx context.Context) (int64, error)
	// Events lists the business event ids in the stream, one per entry, in order.
	Events(ctx context.Context) ([]string, error)
	// Pending counts pending (delivered, unacknowledged) entries per group.
	Pending(ctx context.Context) (map[string]int64, error)
	// PendingStats summarises the pending entries of every group.
	PendingStats(ctx context.Context) (PendingStats, error)
	// Delete removes the stream, its groups and its dead letters: everything
	// this Broker created.
	Delete(ctx context.Context) error
}

// PendingStats is what an operator watches of the pending lists.
type PendingStats struct {
	OldestIdle   time.Duration // the longest a pending entry has waited since its last delivery
	Redeliveries int64         // deliveries beyond the first, over the pending entries
}

// Capability names one thing a broker can do that another may not. A
// scenario that needs a capability its broker lacks is skipped with the
// capability named, never passed.
type Capability string

// The capabilities the pipeline, the steps and the checks can ask for.
const (
	// EntryLog: the broker keeps a log of entries that can be counted and
	// listed, duplicates included (stream.entries, stream.events, trim).
	EntryLog Capability = "entry_log"
	// ClaimByIdle: a worker can take over another worker's unacknowledged
	// entry once it has been idle for a given time (XCLAIM / XAUTOCLAIM).
	ClaimByIdle Capability = "claim_by_idle"
	// PendingList: the broker lists unacknowledged entries per group, with
	// how long each has waited (XPENDING, PendingStats.OldestIdle).
	PendingList Capability = "pending_list"
	// PendingCount: the broker counts unacknowledged entries per group
	// (Pending, and PendingStats.Redeliveries).
	PendingCount Capability = "pending_count"
	// Retention: the broker can be told to drop old entries (Trim), as a
	// retention limit or a broker that lost data would.
	Retention Capability = "retention"
	// ReplayHistory: a group created late still receives every entry the
	// broker holds (a new consumer id reads history).
	ReplayHistory Capability = "replay_history"
	// BrokerDedupe: the broker drops a second publish of the same event id
	// inside a window (JetStream Nats-Msg-Id).
	BrokerDedupe Capability = "broker_dedupe"
	// SideStore: a key-value store beside the broker (Redis HSETNX), used
	// only by the setnx dedupe anti-pattern.
	SideStore Capability = "side_store"
	// Purge: the broker can drop every entry of the stream at once (trim: 0;
	// RabbitMQ queue.purge).
	Purge Capability = "purge"
	// NativeDeadLetter: the broker itself sets aside an entry delivered too
	// often (RabbitMQ x-delivery-limit + dead-letter exchange, JetStream
	// MaxDeliver + its advisory), beside the runner's application-level DLQ.
	NativeDeadLetter Capability = "native_dlq"
	// DeliveryCount: the broker counts how often it delivered each entry
	// (Redis times-delivered, JetStream NumDelivered, RabbitMQ
	// x-delivery-count, Kafka share groups), which a dead-letter limit
	// (max_deliveries) counts on.
	DeliveryCount Capability = "delivery_count"
	// BrokerTxn: the runner can consume, produce an output and acknowledge
	// in ONE broker transaction, readers seeing all or none of it (Kafka's
	// read-process-write: Transactions).
	BrokerTxn Capability = "broker_txn"
	// GroupLag: the broker tells, per consumer group, how many entries the
	// group has not finished with (not yet delivered, or delivered and not
	// acknowledged): Lagging. It reads groups a team's services made too.
	GroupLag Capability = "group_lag"
)

// Lagging is a broker that counts, per consumer group, the entries the
// group has not finished with: Redis XINFO GROUPS lag plus pending,
// JetStream NumPending plus NumAckPending, Kafka the records after the
// group's committed offset. It lists every group of the stream the server
// knows, the ones a team's services made included, by consumer id.
type Lagging interface {
	Lag(ctx context.Context) (map[string]int64, error)
}

// Transactions is a broker whose consumer can read, produce to an output
// and acknowledge in one broker transaction (Kafka's exactly-once
// read-process-write). None of it covers the consumer's database.
type Transactions interface {
	// ReadInTxn begins a transaction and hands worker of group up to count
	// new entries (count <= 0: all), waiting at most block for the first.
	ReadInTxn(ctx context.Context, group, worker string, count int, block time.Duration) (Txn, []Delivery, error)
	// Outputs lists the event ids of the output a reader that sees only
	// committed transactions sees, in order.
	Outputs(ctx context.Context) ([]string, error)
}

// Txn is one open broker transaction.
type Txn interface {
	// Emit produces d's event to the output inside the transaction.
	Emit(ctx context.Context, d Delivery) error
	// Commit makes the outputs and the group's new position visible at once.
	Commit(ctx context.Context) error
	// Abort ends the transaction as a live worker does after a failure:
	// neither its outputs nor its position count, and the worker goes on.
	Abort(ctx context.Context) error
	// Crash kills the worker in the middle, as its process dying would:
	// nothing more reaches the broker — no end of the transaction, no
	// leaving the group. The broker aborts the transaction itself (at its
	// timeout, or when a worker with the same transactional identity
	// starts), so neither its outputs nor its position count.
	Crash(ctx context.Context) error
	// Notes say, for the step's trace, what the broker made this
	// transaction wait for and how it ended.
	Notes() []string
}

// AllCapabilities lists every capability, in the order documents show them.
var AllCapabilities = []Capability{EntryLog, PendingCount, PendingList, GroupLag, DeliveryCount, ClaimByIdle,
	ReplayHistory, Retention, Purge, BrokerDedupe, NativeDeadLetter, BrokerTxn, SideStore}

// Capabilities is a broker's declared capability set.
type Capabilities map[Capability]bool

// Has reports whether c is declared.
func (cs Capabilities) Has(c Capability) bool { return cs[c] }

// NotAcked is the error of an Ack that acknowledged only some of its ids:
// the broker (or the member of the group) held none of IDs any more — acked
// already, or taken back when their worker crashed — or, when Why says so,
// the broker refused their acknowledgement. The others were acked.
type NotAcked struct {
	IDs []string
	Why string // what the broker said, when it refused; empty: no member held them
}

func (e *NotAcked) Error() string {
	if e.Why != "" {
		return fmt.Sprintf("not acknowledged: %v: %s", e.IDs, e.Why)
	}
	return fmt.Sprintf("not acknowledged: no member holds %v (acked already, or taken back from a crashed worker)", e.IDs)
}

// ErrUnsupported is wrapped by an operation a broker cannot perform; the
// message names the missing capability.
var ErrUnsupported = errors.New("not supported by this broker")

// Unsupported is the error of an operation that needs c.
func Unsupported(name string, c Capability) error {
	return fmt.Errorf("%s: %w (needs %s)", name, ErrUnsupported, c)
}

// The names of the built-in brokers, for code that names one (Redis is
// the default broker; tests pick theirs). A broker needs no constant here:
// its Kind.Name is its name, and Names lists every registered one.
const (
	Redis    = "redis"    // Redis Streams
	NATS     = "nats"     // NATS JetStream
	RabbitMQ = "rabbitmq" // RabbitMQ quorum queues
	Kafka    = "kafka"    // Kafka (the runner's own server is franz-go's kfake)
)
