// Package rabbitmq implements broker.Broker on RabbitMQ (AMQP 0-9-1).
//
// One Broker is a fanout exchange named after it, a quorum queue per
// consumer group bound to it, a classic queue bound to it that nobody
// consumes (the entry log), and a classic dead-letter queue. RabbitMQ has no
// pending list and no claim: a delivery stays unacknowledged on the channel
// that took it until it is acked or that channel closes, when the broker
// requeues it. The capabilities say so.
//
// What a Broker keeps is client state a real worker keeps too: each
// worker's channel and the delivery tag of each unacked delivery on it, to
// ack or nack it. It dies with the channel, as the broker's record of the
// delivery does: a restarted worker (a new connection) cannot ack what the
// dead one held, and the broker delivers it again. Nothing else is kept:
// what Read and Claim return is what the broker handed to that call.
//
// Publishes are persistent, confirmed and mandatory: a message no queue
// takes comes back (basic.return) and fails the publish with ErrUnroutable,
// so a relay never marks it published.
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
)

// HeaderEntryID carries the broker entry id: new on every publish, kept by
// the broker across redeliveries.
const HeaderEntryID = "entry-id"

// Dead-letter headers; the event id is the message id, the payload the body.
const (
	headerReason     = "reason"
	headerDeliveries = "deliveries"
)

// Waits. basic.get cannot block, so Read polls; the others bound waits that
// would otherwise depend on the server answering.
const (
	pollEvery   = 10 * time.Millisecond
	landWait    = 2 * time.Second  // a closed channel's messages reaching the queue again
	confirmWait = 30 * time.Second // a publish never confirmed is an error, not a hang
	browseWait  = 10 * time.Second // a browse receiving the messages it counted
)

// ErrNacked is wrapped by a publish the broker refused (basic.nack), for
// example because a queue with x-overflow=reject-publish is full.
var ErrNacked = errors.New("broker nacked the publish")

// entrySeq numbers entry ids process-wide, so that two Brokers on one name
// never hand out the same id.
var entrySeq atomic.Uint64

// Broker is a broker.Broker on one RabbitMQ exchange and its queues. The
// connection is shared by the run; a Broker opens its own channels on it.
type Broker struct {
	conn *amqp.Connection
	name string

	adminMu sync.Mutex
	admin   *amqp.Channel // declares, inspections, deletes

	pubMu sync.Mutex
	pub   *channel // confirm mode; publishes and dead letters

	// browseMu serialises browses: a browse holds a queue's messages
	// unacked for a moment, so a count taken meanwhile would be short.
	browseMu sync.Mutex

	// record, if set, is told every name before it is declared (see
	// NewRecorded).
	record func(names []string) error
	// deliveryLimit, when > 0, has the broker dead-letter a message on its
	// deliveryLimit-th delivery (WithDeliveryLimit).
	deliveryLimit int

	mu      sync.Mutex
	groups  map[string]bool // group queues declared
	queues  []string        // every queue declared, for Delete
	workers map[workerKey]*worker
	// held is client state, what a real worker keeps too: the channel and
	// delivery tag of each unacked delivery, to ack or nack it on. It dies
	// with its channel, as the broker's own record of the delivery does.
	held map[heldKey]holder
}

var _ broker.Broker = (*Broker)(nil)

// Option configures a Broker.
type Option func(*Broker)

// WithDeliveryLimit makes the broker itself dead-letter a message on its
// n-th delivery without an ack (a quorum queue's x-delivery-limit and a
// dead-letter exchange): the broker-native DLQ, beside the application's.
func WithDeliveryLimit(n int) Option { return func(b *Broker) { b.deliveryLimit = n } }

// New declares the exchange, the entry log, the dead-letter queue and a
// queue per group, as infrastructure as code would before anything is
// published. name (like "outboxdrill:RUNID:7") prefixes every name.
func New(ctx context.Context, conn *amqp.Connection, name string, groups []string) (*Broker, error) {
	return NewRecorded(ctx, conn, name, groups, nil)
}

// NewRecorded is New with record told the names of the exchange and of
// every queue before they are declared (also a group queue declared later):
// AMQP 0-9-1 cannot list what a server holds, so whoever must find them
// again (runner clean, after a killed run) keeps them. A record error fails
// the declare.
func NewRecorded(ctx context.Context, conn *amqp.Connection, name string, groups []string, record func(names []string) error, opts ...Option) (*Broker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, errors.New("rabbitmq: empty broker name")
	}
	b := &Broker{
		conn: conn, name: name, groups: map[string]bool{}, record: record,
		workers: map[workerKey]*worker{}, held: map[heldKey]holder{},
	}
	for _, o := range opts {
		o(b)
	}
	if err := b.declareBase(); err != nil {
		return nil, b.abandon(err)
	}
	for _, g := range groups {
		if err := b.ensureGroup(ctx, g); err != nil {
			return nil, b.abandon(err)
		}
	}
	return b, nil
}

// abandon deletes what a failed New declared, so that it leaves nothing behind.
func (b *Broker) abandon(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if derr := b.Delete(ctx); derr != nil {
		return errors.Join(err, fmt.Errorf("cleanup: %w", derr))
	}
	return err
}

// Name is the exchange's name, the prefix of every queue's.
func (b *Broker) Name() string { return b.name }

// Placeholders tell a team's services the exchange and consumer's quorum
// queue, declared and bound now.
func (b *Broker) Placeholders(ctx context.Context, consumer string) (map[string]string, error) {
	q, err := b.GroupQueue(ctx, consumer)
	if err != nil {
		return nil, err
	}
	return map[string]string{"exchange": b.Name(), "destination": b.Name(), "queue": q}, nil
}

// A scenario's broker on its own connection (ownConnBroker) is one too.
var _ broker.Named = (*Broker)(nil)

// Queues lists every queue this Broker has declared.
func (b *Broker) Queues() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.queues)
}

func (b *Broker) logQueue() string               { return b.name + ".log" }
func (b *Broker) dlqQueue() string               { return b.name + ".dlq" }
func (b *Broker) groupQueue(group string) string { return b.name + "." + group }

// Queue arguments. The log and the dead letters are classic queues because a
// classic queue puts a requeued message back in its place, which browsing
// relies on; a quorum queue serves requeued messages first, in the order
// they came back (RabbitMQ 3.10 was seen returning one channel's messages
// out of delivery order).
var (
	classicArgs = amqp.Table{"x-queue-type": "classic"}
)

func (b *Broker) declareBase() error {
	b.remember(b.logQueue(), b.dlqQueue())
	if err := b.tell(b.name, b.logQueue(), b.dlqQueue()); err != nil {
		return err
	}
	return b.withAdmin(func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(b.name, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", b.name, err)
		}
		if err := declareBound(ch, b.logQueue(), b.name, classicArgs); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(b.dlqQueue(), true, false, false, false, classicArgs); err != nil {
			return fmt.Errorf("declare queue %s: %w", b.dlqQueue(), err)
		}
		return nil
	})
}

func declareBound(ch *amqp.Channel, queue, exchange string, args amqp.Table) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s: %w", queue, exchange, err)
	}
	return nil
}

// remember records queues for Delete before they are declared, so that a
// declare that half succeeded is cleaned up too (deleting a missing queue
// is not an error).
func (b *Broker) remember(queues ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range queues {
		if !slices.Contains(b.queues, q) {
			b.queues = append(b.queues, q)
		}
	}
}

// tell records names with the caller's record, if any.
func (b *Broker) tell(names ...string) error {
	if b.record == nil {
		return nil
	}
	if err := b.record(names); err != nil {
		return fmt.Errorf("rabbitmq %s: record names: %w", b.name, err)
	}
	return nil
}

// ensureGroup declares the group's queue on first use. A queue declared
// late only receives what is published after it: no history.
// GroupQueue declares (once) and names the queue of consumer group group,
// bound to the exchange: what a team's consumer is told to consume from
// (${queue}), declared before the relay publishes so it misses nothing.
func (b *Broker) GroupQueue(ctx context.Context, group string) (string, error) {
	if err := b.ensureGroup(ctx, group); err != nil {
		return "", err
	}
	return b.groupQueue(group), nil
}

func (b *Broker) ensureGroup(ctx context.Context, group string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if group == "" || group == "log" || group == "dlq" {
		return fmt.Errorf("rabbitmq %s: %q cannot name a consumer group (its queue name is taken or empty)", b.name, group)
	}
	b.mu.Lock()
	known := b.groups[group]
	b.mu.Unlock()
	if known {
		return nil
	}
	q := b.groupQueue(group)
	b.remember(q)
	if err := b.tell(q); err != nil {
		return err
	}
	if err := b.withAdmin(func(ch *amqp.Channel) error { return declareBound(ch, q, b.name, b.groupArgs()) }); err != nil {
		return err
	}
	b.mu.Lock()
	b.groups[group] = true
	b.mu.Unlock()
	return nil
}

// groupArgs declare a group queue: a quorum queue whose dead letters go to
// the dead-letter queue (the default exchange routes by queue name), so that
// a delivery limit never discards a message silently — RabbitMQ 4 sets a
// limit of 20 on every quorum queue
// (https://www.rabbitmq.com/docs/quorum-queues#poison-message-handling). With
// a broker DLQ, x-delivery-limit makes the broker itself set a message aside
// on its deliveryLimit-th delivery without an ack: the limit counts the
// returns allowed, one fewer.
func (b *Broker) groupArgs() amqp.Table {
	args := amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": b.dlqQueue()}
	if b.deliveryLimit > 0 {
		args["x-delivery-limit"] = int64(b.deliveryLimit - 1)
	}
	return args
}

// withAdmin runs f on the admin channel, reopened if an error closed it.
func (b *Broker) withAdmin(f func(*amqp.Channel) error) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	if b.admin == nil || b.admin.IsClosed() {
		ch, err := b.conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq %s: open channel: %w", b.name, err)
		}
		b.admin = ch
	}
	return f(b.admin)
}

// ready is the number of messages ready in queue (unacked ones not counted).
func (b *Broker) ready(queue string) (int, error) {
	var n int
	err := b.withAdmin(func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("inspect queue %s: %w", queue, err)
	}
	return n, nil
}

// awaitReady waits until queue holds at least want ready messages, or
// landWait has passed: a message the broker requeues reaches a quorum queue
// only after the channel close has been answered.
func (b *Broker) awaitReady(ctx context.Context, queue string, want int) error {
	deadline := time.Now().Add(landWait)
	for {
		n, err := b.ready(queue)
		if err != nil || n >= want || !time.Now().Before(deadline) {
			return err
		}
		if err := sleep(ctx, pollEvery); err != nil {
			return err
		}
	}
}

// Capabilities: an entry log and nothing else. A claim is a get of what the
// queue hands out (a nacked or crashed worker's deliveries first), not a
// takeover by idle entry; there is no pending list or count; a late group
// gets no history; queues cannot drop old entries honestly.
func (b *Broker) Capabilities() broker.Capabilities { return capabilities(broker.Scenario{}) }

// capabilities are a queue set's, whatever the scenario
// (Kind.Capabilities): it has no options that change them.
func capabilities(broker.Scenario) broker.Capabilities {
	return broker.Capabilities{broker.EntryLog: true, broker.Purge: true, broker.NativeDeadLetter: true, broker.DeliveryCount: true}
}

// Publish publishes msgs in confirm mode, persistent, and waits for the
// confirms. It returns the entry ids confirmed before the first nack or
// error. A nacked message may still have reached the other queues (a nack
// says one queue refused it), and one after it may have been confirmed.
func (b *Broker) Publish(ctx context.Context, msgs []broker.Message) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	pub, err := b.publisher()
	if err != nil {
		return nil, fmt.Errorf("publish to exchange %s: %w", b.name, err)
	}
	ids := make([]string, 0, len(msgs))
	dcs := make([]*amqp.DeferredConfirmation, 0, len(msgs))
	events := make([]string, 0, len(msgs))
	var sendErr error
	for _, m := range msgs {
		id := b.name + "-" + strconv.FormatUint(entrySeq.Add(1), 10)
		dc, err := pub.ch.PublishWithDeferredConfirmWithContext(ctx, b.name, "", true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: m.EventID,
			Headers: amqp.Table{HeaderEntryID: id}, Body: []byte(m.Payload),
		})
		if err != nil {
			sendErr = fmt.Errorf("publish event %s to exchange %s: %w", m.EventID, b.name, pub.cause(err))
			break
		}
		ids, dcs, events = append(ids, id), append(dcs, dc), append(events, m.EventID)
	}
	n, err := awaitConfirms(ctx, pub, dcs, events, "exchange "+b.name)
	if err == nil {
		err = sendErr
	}
	// mandatory: the broker returns a message no queue took (basic.return)
	// before it confirms it, so every return is in by now. The ids stop at
	// the first one returned: the relay must not mark it published.
	if r, ok := firstReturned(pub, ids[:n]); ok {
		return ids[:r.index], fmt.Errorf("publish event %s to exchange %s: %w (%d %s)", events[r.index], b.name, ErrUnroutable, r.code, r.text)
	}
	return ids[:n], err
}

// ErrUnroutable is wrapped by a publish no queue took: the broker returned
// it (mandatory flag) instead of dropping it silently.
var ErrUnroutable = errors.New("no queue is bound to take the message: the broker returned it")

type returned struct {
	index int
	code  uint16
	text  string
}

// firstReturned drains the channel's returns and finds the earliest of ids.
func firstReturned(pub *channel, ids []string) (returned, bool) {
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		at[id] = i
	}
	best := returned{index: -1}
	for {
		select {
		case r, open := <-pub.returns:
			if !open { // the channel closed: its error is the publish's
				return best, best.index >= 0
			}
			id, _ := r.Headers[HeaderEntryID].(string)
			if i, ok := at[id]; ok && (best.index < 0 || i < best.index) {
				best = returned{index: i, code: r.ReplyCode, text: r.ReplyText}
			}
		default:
			return best, best.index >= 0
		}
	}
}

// publisher is the confirm-mode channel, reopened if an error closed it
// (the error was reported by the call that met it).
func (b *Broker) publisher() (*channel, error) {
	if b.pub != nil && !b.pub.ch.IsClosed() {
		return b.pub, nil
	}
	c, err := b.open()
	if err != nil {
		return nil, err
	}
	if err := c.ch.Confirm(false); err != nil {
		_ = c.ch.Close()
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	c.returns = c.ch.NotifyReturn(make(chan amqp.Return, 1024))
	b.pub = c
	return c, nil
}

// awaitConfirms waits for the confirms in publish order and returns how
// many were acked before the first nack, error or timeout. After a nack it
// still waits for the broker's answer to the rest (within the same
// timeout): they were sent, and what the broker then holds is settled
// when the publish returns (a read right after it counted the log short
// of a message the broker took just after). The client nacks every
// pending confirm when the channel closes, so a nack on a closed channel
// reports why it closed.
func awaitConfirms(ctx context.Context, pub *channel, dcs []*amqp.DeferredConfirmation, events []string, target string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, confirmWait)
	defer cancel()
	for i, dc := range dcs {
		ack, err := dc.WaitContext(ctx)
		if err == nil && !ack {
			err = ErrNacked
			if cerr := pub.err(); cerr != nil {
				err = fmt.Errorf("channel closed: %w", cerr)
			}
		}
		if err != nil {
			for _, rest := range dcs[i+1:] {
				if _, werr := rest.WaitContext(ctx); werr != nil {
					break // the timeout, or the caller's end: no answer to wait for
				}
			}
			return i, fmt.Errorf("confirm of event %s on %s: %w", events[i], target, err)
		}
	}
	return len(dcs), nil
}

// Trim to 0 is queue.purge of the entry log and of every group queue: the
// broker drops every message not awaiting acknowledgement (what a
// delivered, unacked one does is up to its channel; purge leaves it,
// https://www.rabbitmq.com/docs/queues#purging). It returns what the log
// held. Keeping the newest N cannot be honest on queues: dropping the
// oldest from a group queue means taking messages off it and putting the
// newer ones back redelivered and reordered (no retention).
func (b *Broker) Trim(ctx context.Context, keep int) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if keep > 0 {
		return 0, fmt.Errorf("rabbitmq %s: %w", b.name, broker.Unsupported("trim", broker.Retention))
	}
	b.mu.Lock()
	queues := []string{b.logQueue()}
	for g := range b.groups {
		queues = append(queues, b.groupQueue(g))
	}
	b.mu.Unlock()
	var dropped int64
	err := b.withAdmin(func(ch *amqp.Channel) error {
		for i, q := range queues {
			n, err := ch.QueuePurge(q, false)
			if err != nil {
				return fmt.Errorf("purge %s: %w", q, err)
			}
			if i == 0 {
				dropped = int64(n)
			}
		}
		return nil
	})
	return dropped, err
}

// Pending: AMQP 0-9-1 reports only a queue's ready messages; the unacked
// ones are known to the management plugin, not to the protocol. Counting
// them client-side would report what this process believes, not the broker.
func (b *Broker) Pending(ctx context.Context) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("rabbitmq %s: %w", b.name, broker.Unsupported("pending", broker.PendingCount))
}

// PendingStats: see Pending.
func (b *Broker) PendingStats(ctx context.Context) (broker.PendingStats, error) {
	if err := ctx.Err(); err != nil {
		return broker.PendingStats{}, err
	}
	return broker.PendingStats{}, fmt.Errorf("rabbitmq %s: %w", b.name, broker.Unsupported("pending stats", broker.PendingCount))
}

// Delete closes the Broker's channels (requeueing what they held, into
// queues about to go) and deletes every queue it declared and its
// exchange; nothing else. Deleting what is already gone is not an error.
func (b *Broker) Delete(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.closeWorkers()
	b.pubMu.Lock()
	if b.pub != nil {
		_ = b.pub.ch.Close() // a channel already closed is fine: there is nothing to release
	}
	b.pubMu.Unlock()
	var errs []error
	for _, q := range b.Queues() {
		err := b.withAdmin(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
		if err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
		}
	}
	if err := b.withAdmin(func(ch *amqp.Channel) error { return ch.ExchangeDelete(b.name, false, false) }); err != nil {
		errs = append(errs, fmt.Errorf("delete exchange %s: %w", b.name, err))
	}
	b.adminMu.Lock()
	if b.admin != nil {
		_ = b.admin.Close()
	}
	b.adminMu.Unlock()
	return errors.Join(errs...)
}

// channel is an AMQP channel that remembers why the server closed it.
type channel struct {
	ch      *amqp.Channel
	done    chan struct{} // closed once the channel has closed
	reason  atomic.Pointer[amqp.Error]
	returns chan amqp.Return // the publisher's: messages no queue took
}

func (b *Broker) open() (*channel, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq %s: open channel: %w", b.name, err)
	}
	c := &channel{ch: ch, done: make(chan struct{})}
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		// The client sends the server's reason, if any, then closes closes.
		for e := range closes {
			c.reason.Store(e)
		}
		close(c.done)
	}()
	return c, nil
}

// err is nil while the channel is open, else why it closed.
func (c *channel) err() error {
	if !c.ch.IsClosed() {
		return nil
	}
	select { // the reason is stored just after the channel is marked closed
	case <-c.done:
	case <-time.After(100 * time.Millisecond):
	}
	if e := c.reason.Load(); e != nil {
		return e
	}
	return amqp.ErrClosed
}

// cause is err, or the server's reason when err only says the channel was
// closed under the call (the client's 504 "channel/connection is not open").
func (c *channel) cause(err error) error {
	if cerr := c.err(); cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
		return cerr
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
