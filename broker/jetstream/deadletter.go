package jetstream

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
)

// DeadLetter publishes dl to the dead-letter stream: the payload as data,
// everything else in headers. No Nats-Msg-Id: setting an event aside twice
// is two dead letters, as on Redis.
func (s *Stream) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	m := nats.NewMsg(subject(s.dlqName()))
	m.Header.Set(HeaderEventID, dl.EventID)
	m.Header.Set(HeaderReason, dl.Reason)
	m.Header.Set(HeaderEntryID, dl.EntryID)
	m.Header.Set(HeaderDeliveries, strconv.Itoa(dl.Deliveries))
	m.Data = []byte(dl.Payload)
	if _, err := s.js.PublishMsg(ctx, m, jetstream.WithExpectStream(s.dlqName())); err != nil {
		return fmt.Errorf("jetstream publish %s (dead letter for event %s): %w", s.dlqName(), dl.EventID, err)
	}
	return nil
}

// DeadLetters lists the dead-letter stream.
func (s *Stream) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, _, err := s.readDLQ(ctx)
	return dls, err
}

// TakeDeadLetters lists the dead-letter stream and purges what it listed;
// a dead letter added in between stays.
func (s *Stream) TakeDeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, last, err := s.readDLQ(ctx)
	if err != nil || len(dls) == 0 {
		return nil, err
	}
	st, err := s.stream(ctx, s.dlqName())
	if err != nil {
		return nil, err
	}
	// Purge with a sequence drops the messages below it.
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(last+1)); err != nil {
		return nil, fmt.Errorf("jetstream purge %s: %w", s.dlqName(), err)
	}
	return dls, nil
}

// readDLQ reads the dead letters and the sequence of the last one.
func (s *Stream) readDLQ(ctx context.Context) ([]broker.DeadLetter, uint64, error) {
	msgs, err := s.all(ctx, s.dlqName())
	if err != nil {
		return nil, 0, err
	}
	dls := make([]broker.DeadLetter, len(msgs))
	var last uint64
	for i, m := range msgs {
		n, _ := strconv.Atoi(m.header.Get(HeaderDeliveries))
		dls[i] = broker.DeadLetter{
			EventID: m.header.Get(HeaderEventID), Payload: string(m.data),
			Reason: m.header.Get(HeaderReason), EntryID: m.header.Get(HeaderEntryID), Deliveries: n,
		}
		last = m.seq
	}
	return dls, last, nil
}
