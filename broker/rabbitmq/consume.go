package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
)

// A worker is one consumer process of a group: its own channel, so that
// closing it (a crash, or Claim) gives back exactly what it held.
type worker struct {
	workerKey
	*channel
	held map[uint64]heldEntry // by delivery tag; guarded by Broker.mu
}

type workerKey struct{ group, name string }

type heldEntry struct {
	id string // entry id; "" for a message without one (not ackable)
}

type heldKey struct{ group, id string }

type holder struct {
	w   *worker
	tag uint64
}

// worker returns the worker's channel, opening it on first use. A channel
// the server closed is reported once and dropped; the next call opens a
// new one, as a restarted worker would.
func (b *Broker) worker(group, name string) (*worker, error) {
	k := workerKey{group, name}
	b.mu.Lock()
	w := b.workers[k]
	b.mu.Unlock()
	if w != nil {
		if err := w.err(); err != nil {
			b.drop(w)
			return nil, fmt.Errorf("worker %s on %s: channel closed by the broker, its deliveries requeued: %w", name, b.groupQueue(group), err)
		}
		return w, nil
	}
	c, err := b.open()
	if err != nil {
		return nil, fmt.Errorf("worker %s on %s: %w", name, b.groupQueue(group), err)
	}
	w = &worker{workerKey: k, channel: c, held: map[uint64]heldEntry{}}
	b.mu.Lock()
	defer b.mu.Unlock()
	if other := b.workers[k]; other != nil { // a concurrent first use won
		_ = c.ch.Close() // it holds nothing yet
		return other, nil
	}
	b.workers[k] = w
	return w, nil
}

// drop forgets w and the delivery tags it held: they die with its channel,
// and the broker requeues what they named.
func (b *Broker) drop(w *worker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropLocked(w)
}

func (b *Broker) dropLocked(w *worker) {
	if b.workers[w.workerKey] == w {
		delete(b.workers, w.workerKey)
	}
	for tag, e := range w.held {
		k := heldKey{w.group, e.id}
		if h, ok := b.held[k]; ok && h.w == w && h.tag == tag {
			delete(b.held, k)
		}
	}
	w.held = map[uint64]heldEntry{}
}

// failed closes w's channel after an error, so that everything it held is
// requeued and nothing is half known, and returns err.
func (b *Broker) failed(w *worker, err error) error {
	b.drop(w)
	_ = w.ch.Close() // may already be closed: that is the usual cause
	return err
}

// closeWorkers closes every worker channel (Delete).
func (b *Broker) closeWorkers() {
	b.mu.Lock()
	ws := make([]*worker, 0, len(b.workers))
	for _, w := range b.workers {
		ws = append(ws, w)
		b.dropLocked(w)
	}
	b.mu.Unlock()
	for _, w := range ws {
		_ = w.ch.Close()
	}
}

// Read takes up to count messages (count <= 0: all ready) off the group's
// queue onto the worker's channel, waiting at most block for the first.
// Unlike XREADGROUP ">", a message requeued by a closed channel comes
// first (quorum queues serve returned messages before new ones), marked by
// Deliveries >= 2.
func (b *Broker) Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]broker.Delivery, error) {
	if err := b.ensureGroup(ctx, group); err != nil {
		return nil, err
	}
	w, err := b.worker(group, worker)
	if err != nil {
		return nil, err
	}
	return b.take(ctx, w, count, block)
}

// take basic.gets up to count messages (count <= 0: until none is ready)
// onto w's channel; only the first get waits, polling, up to block. Every
// message taken is remembered for Ack, even when a later get fails.
func (b *Broker) take(ctx context.Context, w *worker, count int, block time.Duration) ([]broker.Delivery, error) {
	q := b.groupQueue(w.group)
	deadline := time.Now().Add(block)
	var out []broker.Delivery
	for count <= 0 || len(out) < count {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		m, ok, err := w.ch.Get(q, false)
		if err != nil {
			return out, b.failed(w, fmt.Errorf("basic.get from %s (worker %s): %w", q, w.name, w.cause(err)))
		}
		if ok {
			d, err := b.hold(w, m)
			if err != nil {
				return out, err
			}
			out = append(out, d)
			continue
		}
		if len(out) > 0 || !time.Now().Before(deadline) {
			break
		}
		if err := sleep(ctx, min(pollEvery, time.Until(deadline))); err != nil {
			return out, err
		}
	}
	return out, nil
}

// hold records that w holds m, for Ack and Claim.
func (b *Broker) hold(w *worker, m amqp.Delivery) (broker.Delivery, error) {
	d := delivery(m)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.workers[w.workerKey] != w { // a Claim closed the channel under this get: the broker has it back
		return d, fmt.Errorf("worker %s on %s: channel closed by a claim while reading (event %s requeued)", w.name, b.groupQueue(w.group), d.EventID)
	}
	w.held[m.DeliveryTag] = heldEntry{id: d.ID}
	if d.ID == "" { // not published by a Broker; it stays unacked until the channel closes
		return d, fmt.Errorf("message of event %s on %s has no %s header", d.EventID, b.groupQueue(w.group), HeaderEntryID)
	}
	k := heldKey{w.group, d.ID}
	if old, ok := b.held[k]; ok && old.w != w { // cannot happen unless the old channel died unnoticed
		delete(old.w.held, old.tag)
	}
	b.held[k] = holder{w, m.DeliveryTag}
	return d, nil
}

// delivery converts a message of a group queue.
func delivery(m amqp.Delivery) broker.Delivery {
	id, _ := m.Headers[HeaderEntryID].(string)
	return broker.Delivery{ID: id, EventID: m.MessageId, Payload: string(m.Body), Deliveries: deliveries(m)}
}

// deliveries: a quorum queue counts returns in x-delivery-count (RabbitMQ
// 3.10 sends 0 on the first delivery and counts a channel closing as a
// return); any queue says whether the message was delivered before, which
// is the floor where the count is missing or counts only failures.
func deliveries(m amqp.Delivery) int {
	n := 1
	if m.Redelivered {
		n = 2
	}
	if c, ok := toInt(m.Headers["x-delivery-count"]); ok {
		n = max(n, c+1)
	}
	return n
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int32:
		return int(n), true
	case int16:
		return int(n), true
	case int8:
		return int(n), true
	case uint8:
		return int(n), true
	case int:
		return n, true
	}
	return 0, false
}

// LiveWorkerKeeps: a delivery is its channel's until acked, nacked or the
// channel closes (https://www.rabbitmq.com/docs/confirms#consumer-acks-and-redelivery);
// a claim is only another read of the queue (broker.LiveKeeper).
func (b *Broker) LiveWorkerKeeps() bool { return true }

// Claim takes what the group's queue hands out now, as a consumer of a
// RabbitMQ queue would: RabbitMQ has no pending list to claim from and no
// per-message idle time (no ClaimByIdle; a claim with an idle time is never
// asked of it). A delivery comes back to the queue only when its worker
// nacks it or its channel closes (Crash, or a dead process's connection
// dropping); the queue serves it again first. So a claim after a crash or a
// rollback gets the returned messages — and, unlike XCLAIM, a new message
// too when nothing was returned: that is what the broker hands out.
func (b *Broker) Claim(ctx context.Context, group, worker string, _ time.Duration, count int) ([]broker.Delivery, error) {
	if err := b.ensureGroup(ctx, group); err != nil {
		return nil, err
	}
	w, err := b.worker(group, worker)
	if err != nil {
		return nil, err
	}
	return b.take(ctx, w, count, 0)
}

// AutoClaim is Claim: the broker has no scan of its own.
func (b *Broker) AutoClaim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	return b.Claim(ctx, group, worker, minIdle, count)
}

// Ack acks ids, each on the channel that holds it. An id no open channel
// holds is an error naming it, and then nothing is acked.
func (b *Broker) Ack(ctx context.Context, group string, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	byWorker, err := b.holders(group, ids)
	if err != nil {
		return err
	}
	var errs []error
	for w, refs := range byWorker {
		errs = append(errs, b.ackOn(w, refs))
	}
	return errors.Join(errs...)
}

type ackRef struct {
	id  string
	tag uint64
}

// holders groups ids by the worker holding them, duplicates dropped (a
// second ack of one tag would close the channel).
func (b *Broker) holders(group string, ids []string) (map[*worker][]ackRef, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[*worker][]ackRef{}
	seen := map[string]bool{}
	var unknown []string
	for _, id := range ids {
		h, ok := b.held[heldKey{group, id}]
		switch {
		case seen[id]:
		case !ok:
			unknown = append(unknown, id)
		default:
			out[h.w] = append(out[h.w], ackRef{id, h.tag})
		}
		seen[id] = true
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("ack on %s: %s not held by any open channel of group %s (never delivered, already acked, or requeued when its channel closed)",
			b.groupQueue(group), strings.Join(unknown, ", "), group)
	}
	return out, nil
}

// ackOn acks on w's channel, then makes one synchronous call on it: acks
// have no reply, and the server closes the channel on a bad one, which
// that call then reports.
func (b *Broker) ackOn(w *worker, refs []ackRef) error {
	q := b.groupQueue(w.group)
	fail := func(err error) error {
		ids := make([]string, len(refs))
		for i, r := range refs {
			ids[i] = r.id
		}
		return b.failed(w, fmt.Errorf("ack %s on %s (worker %s): %w", strings.Join(ids, ", "), q, w.name, w.cause(err)))
	}
	for _, r := range refs {
		if err := w.ch.Ack(r.tag, false); err != nil {
			return fail(err)
		}
	}
	if _, err := w.ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
		return fail(err)
	}
	b.release(w, refs)
	return nil
}

// release forgets acked deliveries.
func (b *Broker) release(w *worker, refs []ackRef) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range refs {
		delete(w.held, r.tag)
		k := heldKey{w.group, r.id}
		if h, ok := b.held[k]; ok && h.w == w && h.tag == r.tag {
			delete(b.held, k)
		}
	}
}

// Nack gives ids back to the queue now (basic.nack, requeue), each on the
// channel that holds it.
func (b *Broker) Nack(ctx context.Context, group string, ids ...string) error {
	if err := ctx.Err(); err != nil || len(ids) == 0 {
		return err
	}
	byWorker, err := b.holders(group, ids)
	if err != nil {
		return err
	}
	q := b.groupQueue(group)
	before, err := b.ready(q)
	if err != nil {
		return err
	}
	var errs []error
	for w, refs := range byWorker {
		for _, r := range refs {
			if err := w.ch.Nack(r.tag, false, true); err != nil {
				errs = append(errs, b.failed(w, fmt.Errorf("nack %s on %s (worker %s): %w", r.id, b.groupQueue(group), w.name, w.cause(err))))
				break
			}
		}
		b.release(w, refs)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return b.awaitReady(ctx, q, before+len(ids))
}

// Crash closes worker's channel, as its process dying would: the broker
// requeues every delivery it held. It returns once they are back in the
// queue (a quorum queue requeues after the close has been answered), so
// that what a scenario checks next is the broker's state after the crash.
func (b *Broker) Crash(ctx context.Context, group, worker string) error {
	q := b.groupQueue(group)
	b.mu.Lock()
	w := b.workers[workerKey{group, worker}]
	held := 0
	if w != nil {
		held = len(w.held)
		b.dropLocked(w)
	}
	b.mu.Unlock()
	if w == nil {
		return ctx.Err()
	}
	before, err := b.ready(q)
	if err != nil {
		return err
	}
	if err := w.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close channel of worker %s on %s: %w", worker, q, err)
	}
	return b.awaitReady(ctx, q, before+held)
}
