package rabbitmq

import (
	"context"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
)

// Entries counts the entry log's messages: one per publish, duplicates
// included, since nobody consumes the log.
func (b *Broker) Entries(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	b.browseMu.Lock()
	defer b.browseMu.Unlock()
	n, err := b.ready(b.logQueue())
	return int64(n), err
}

// Events lists the event id of every entry in the log, in publish order.
func (b *Broker) Events(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.browseMu.Lock()
	defer b.browseMu.Unlock()
	ms, err := b.browse(ctx, b.logQueue(), false)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.MessageId
	}
	return ids, nil
}

// browse receives the messages ready in queue when it starts, on a channel
// of its own, without acking them, then closes the channel: a classic queue
// puts requeued messages back in their places, so the queue is left as it
// was, and browse waits until they are back. With take it acks them
// instead, emptying the queue of what it returns.
func (b *Broker) browse(ctx context.Context, queue string, take bool) ([]amqp.Delivery, error) {
	n, err := b.ready(queue)
	if err != nil || n == 0 {
		return nil, err
	}
	c, err := b.open()
	if err != nil {
		return nil, fmt.Errorf("browse %s: %w", queue, err)
	}
	ms, err := receive(ctx, c, queue, n)
	if err == nil && take {
		err = ackAll(c, queue, ms[len(ms)-1].DeliveryTag)
	}
	if cerr := c.ch.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("browse %s: %w", queue, err)
	}
	if !take {
		if err := b.awaitReady(ctx, queue, n); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// receive consumes the first n messages of queue on c, unacked.
func receive(ctx context.Context, c *channel, queue string, n int) ([]amqp.Delivery, error) {
	ds, err := c.ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, err
	}
	timeout := time.NewTimer(browseWait)
	defer timeout.Stop()
	ms := make([]amqp.Delivery, 0, n)
	for len(ms) < n {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout.C:
			return nil, fmt.Errorf("received %d of %d messages in %v", len(ms), n, browseWait)
		case m, ok := <-ds:
			if !ok {
				return nil, fmt.Errorf("consumer closed after %d of %d messages: %w", len(ms), n, c.err())
			}
			ms = append(ms, m)
		}
	}
	return ms, nil
}

// ackAll acks every delivery up to tag, then makes a synchronous call so
// that a refused ack is reported here.
func ackAll(c *channel, queue string, tag uint64) error {
	if err := c.ch.Ack(tag, true); err != nil {
		return err
	}
	_, err := c.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return err
}

// DeadLetter publishes dl to the dead-letter queue, persistent, and waits
// for the confirm.
func (b *Broker) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.pubMu.Lock()
	defer b.pubMu.Unlock()
	q := b.dlqQueue()
	pub, err := b.publisher()
	if err != nil {
		return fmt.Errorf("dead-letter event %s to %s: %w", dl.EventID, q, err)
	}
	dc, err := pub.ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: dl.EventID, Body: []byte(dl.Payload),
		Headers: amqp.Table{headerReason: dl.Reason, HeaderEntryID: dl.EntryID, headerDeliveries: int64(dl.Deliveries)},
	})
	if err != nil {
		return fmt.Errorf("dead-letter event %s to %s: %w", dl.EventID, q, err)
	}
	_, err = awaitConfirms(ctx, pub, []*amqp.DeferredConfirmation{dc}, []string{dl.EventID}, "queue "+q)
	return err
}

// DeadLetters lists the dead-letter queue without consuming it.
func (b *Broker) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	return b.deadLetters(ctx, false)
}

// TakeDeadLetters consumes the dead-letter queue and returns what it held.
func (b *Broker) TakeDeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	return b.deadLetters(ctx, true)
}

func (b *Broker) deadLetters(ctx context.Context, take bool) ([]broker.DeadLetter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.browseMu.Lock()
	defer b.browseMu.Unlock()
	ms, err := b.browse(ctx, b.dlqQueue(), take)
	if err != nil {
		return nil, err
	}
	dls := make([]broker.DeadLetter, len(ms))
	for i, m := range ms {
		dls[i] = b.deadLetter(m)
	}
	return dls, nil
}

// deadLetter reads a message of the dead-letter queue: one the application
// put there (reason and deliveries in headers), or one the broker
// dead-lettered itself (its x-death header says why and from where; the
// delivery count only where the message carries x-delivery-count, else 0:
// unknown, never the configured limit).
func (b *Broker) deadLetter(m amqp.Delivery) broker.DeadLetter {
	entry, _ := m.Headers[HeaderEntryID].(string)
	dl := broker.DeadLetter{EventID: m.MessageId, Payload: string(m.Body), EntryID: entry}
	if reason, ok := m.Headers[headerReason].(string); ok {
		dl.Reason = reason
		dl.Deliveries, _ = toInt(m.Headers[headerDeliveries])
		return dl
	}
	why := "dead-lettered"
	if deaths, ok := m.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if d, ok := deaths[0].(amqp.Table); ok {
			if r, ok := d["reason"].(string); ok {
				why = r
			}
			if q, ok := d["queue"].(string); ok {
				why += " from " + q
			}
		}
	}
	dl.Reason = "broker: " + why
	// The count is the broker's own only if the message carries it
	// (x-delivery-count); the queue's configured limit is not a count the
	// broker reported, so it goes in the reason, never in Deliveries.
	if c, ok := toInt(m.Headers["x-delivery-count"]); ok {
		dl.Deliveries = c + 1
	}
	if strings.HasPrefix(why, "delivery_limit") && b.deliveryLimit > 0 {
		dl.Reason += fmt.Sprintf(" (the queue's x-delivery-limit is %d)", b.deliveryLimit)
	}
	return dl
}
