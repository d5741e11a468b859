package kafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker"
)

// DeadLetter produces dl to the dead-letter topic, keyed by its event id,
// the reason, entry id and delivery count in headers.
func (t *Topic) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	r := &kgo.Record{Topic: t.dlqName(), Key: []byte(dl.EventID), Value: []byte(dl.Payload), Headers: []kgo.RecordHeader{
		{Key: HeaderReason, Value: []byte(dl.Reason)},
		{Key: HeaderEntryID, Value: []byte(dl.EntryID)},
		{Key: HeaderDeliveries, Value: []byte(strconv.Itoa(dl.Deliveries))},
	}}
	if err := t.prod.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("kafka dead-letter %s (event %s): %w", t.dlqName(), dl.EventID, err)
	}
	return nil
}

// DeadLetters lists the dead-letter topic, oldest first.
func (t *Topic) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	recs, err := t.read(ctx, t.dlqName(), kgo.ReadUncommitted())
	return deadLetters(recs), err
}

// TakeDeadLetters lists the dead-letter topic and deletes the records it
// listed.
func (t *Topic) TakeDeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	recs, err := t.read(ctx, t.dlqName(), kgo.ReadUncommitted())
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	if err := t.deleteThrough(ctx, recs); err != nil {
		return nil, fmt.Errorf("%s: %w", t.dlqName(), err)
	}
	return deadLetters(recs), nil
}

func deadLetters(recs []*kgo.Record) []broker.DeadLetter {
	out := make([]broker.DeadLetter, len(recs))
	for i, r := range recs {
		dl := broker.DeadLetter{EventID: string(r.Key), Payload: string(r.Value)}
		for _, h := range r.Headers {
			switch h.Key {
			case HeaderReason:
				dl.Reason = string(h.Value)
			case HeaderEntryID:
				dl.EntryID = string(h.Value)
			case HeaderDeliveries:
				dl.Deliveries, _ = strconv.Atoi(string(h.Value))
			}
		}
		out[i] = dl
	}
	return out
}
