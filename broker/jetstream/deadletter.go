package jetstream

import (
	"context"
	"encoding/json"
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

// DeadLetters lists the dead-letter stream, then what the server itself
// set aside (MaxDeliver).
func (s *Stream) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, _, err := s.readDLQ(ctx)
	if err != nil {
		return nil, err
	}
	native, _, err := s.readAdvisories(ctx)
	return append(dls, native...), err
}

// TakeDeadLetters lists both and purges what it listed; a dead letter added
// in between stays.
func (s *Stream) TakeDeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, last, err := s.readDLQ(ctx)
	if err != nil {
		return nil, err
	}
	native, lastAdv, err := s.readAdvisories(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.purgeUpTo(ctx, s.dlqName(), last); err != nil {
		return nil, err
	}
	if err := s.purgeUpTo(ctx, s.advName(), lastAdv); err != nil {
		return nil, err
	}
	return append(dls, native...), nil
}

// purgeUpTo drops stream name's messages up to sequence last (0: none).
func (s *Stream) purgeUpTo(ctx context.Context, name string, last uint64) error {
	if last == 0 {
		return nil
	}
	st, err := s.stream(ctx, name)
	if err != nil {
		return err
	}
	// Purge with a sequence drops the messages below it.
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(last+1)); err != nil {
		return fmt.Errorf("jetstream purge %s: %w", name, err)
	}
	return nil
}

// maxDeliveries is the MAX_DELIVERIES advisory's body.
type maxDeliveries struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// readAdvisories turns each MAX_DELIVERIES advisory into a dead letter: the
// message it names, read from the stream by sequence.
func (s *Stream) readAdvisories(ctx context.Context) ([]broker.DeadLetter, uint64, error) {
	if s.opt.MaxDeliver <= 0 {
		return nil, 0, nil
	}
	advs, err := s.all(ctx, s.advName())
	if err != nil {
		return nil, 0, err
	}
	st, err := s.stream(ctx, s.name)
	if err != nil {
		return nil, 0, err
	}
	var out []broker.DeadLetter
	var last uint64
	for _, a := range advs {
		last = a.seq
		var md maxDeliveries
		if err := json.Unmarshal(a.data, &md); err != nil {
			return nil, 0, fmt.Errorf("jetstream advisory in %s: %w", s.advName(), err)
		}
		m, err := st.GetMsg(ctx, md.StreamSeq)
		if err != nil {
			return nil, 0, fmt.Errorf("jetstream get %s seq %d (dead-lettered by the server): %w", s.name, md.StreamSeq, err)
		}
		out = append(out, broker.DeadLetter{EventID: m.Header.Get(HeaderEventID), Payload: string(m.Data),
			Reason: "broker: max deliveries reached (consumer " + md.Consumer + ")", EntryID: strconv.FormatUint(md.StreamSeq, 10), Deliveries: md.Deliveries})
	}
	return out, last, nil
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
