// Package jetstream implements broker.Broker on NATS JetStream: one stream
// per scenario, one durable pull consumer per consumer group, and a second
// stream for dead letters.
//
// JetStream is not Redis Streams, and the differences show in drills:
//
//   - There is no per-worker ownership. A pull consumer hands a message to
//     whichever pull asks; the worker name is only recorded beside the
//     delivery, never sent to the server.
//   - A message comes back only after AckWait (or a Nak), and only on a later
//     pull. So Claim cannot take over an entry idle for less than AckWait
//     (minIdle is ignored) and waits for the server instead: ClaimByIdle is
//     not declared.
//   - A pull returns redeliveries before new messages and mixes both. Read
//     and Claim both return whatever the server delivered to that pull:
//     nothing is held back for another call.
//   - What the Stream keeps is client state a real worker keeps too: the
//     message to ack or nak for each delivery (jetstream.Msg). It dies with
//     the worker (Crash), and a new connection starts without it.
//   - The server cannot say how long a pending message has waited, so
//     PendingStats.OldestIdle stays 0: PendingList is not declared.
package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/outboxdrill/runner/broker"
)

// Header names of a stream message. Nats-Msg-Id is JetStream's own dedupe key.
const (
	HeaderMsgID      = jetstream.MsgIDHeader // "Nats-Msg-Id"
	HeaderEventID    = "event-id"
	HeaderReason     = "reason"
	HeaderEntryID    = "entry-id"
	HeaderDeliveries = "deliveries"
)

// Defaults of Options.
const (
	DefaultAckWait      = time.Second
	DefaultDedupeWindow = 2 * time.Minute
)

// Options configure a Stream.
type Options struct {
	// AckWait is how long a delivered, unacknowledged message waits before
	// the server delivers it again (default 1s). Claim waits this long.
	AckWait time.Duration
	// Dedupe sets Nats-Msg-Id to the event id, so the server drops a second
	// publish of the same event inside DedupeWindow (BrokerDedupe).
	Dedupe bool
	// DedupeWindow is the stream's duplicate window (default 2m).
	DedupeWindow time.Duration
	// MaxDeliver, when > 0, has the server stop delivering a message on its
	// MaxDeliver-th delivery without an ack and announce it (the
	// MAX_DELIVERIES advisory), which the Stream captures in a stream of its
	// own and lists as a dead letter: the broker-native DLQ.
	MaxDeliver int
}

func (o Options) withDefaults() Options {
	if o.AckWait <= 0 {
		o.AckWait = DefaultAckWait
	}
	if o.DedupeWindow <= 0 {
		o.DedupeWindow = DefaultDedupeWindow
	}
	return o
}

// Stream is a broker.Broker on one JetStream stream. The connection is
// shared by the whole run; a Stream owns its two streams and its consumers.
type Stream struct {
	js   jetstream.JetStream
	name string // stream name, also the first token of its subject
	opt  Options

	mu     sync.Mutex
	groups map[string]*group // by the caller's group name
	reads  uint64            // Reads and Claims so far: each names the handles it keeps
}

var _ broker.Broker = (*Stream)(nil)

// New creates (or opens, if one with the same config exists) the stream for
// name and its dead-letter stream. name is sanitized into a stream name:
// every character outside [A-Za-z0-9_-] becomes '_'.
func New(ctx context.Context, js jetstream.JetStream, name string, opt Options) (*Stream, error) {
	sn := sanitize(name)
	if strings.Trim(sn, "_") == "" {
		return nil, fmt.Errorf("jetstream: stream name %q has no usable character", name)
	}
	s := &Stream{js: js, name: sn, opt: opt.withDefaults(), groups: map[string]*group{}}
	if err := s.createStream(ctx, s.name, s.opt.DedupeWindow); err != nil {
		return nil, err
	}
	if err := s.createStream(ctx, s.dlqName(), 0); err != nil {
		// Do not leave half a broker behind.
		_ = s.js.DeleteStream(context.WithoutCancel(ctx), s.name)
		return nil, err
	}
	if s.opt.MaxDeliver > 0 {
		if err := s.createAdvisories(ctx); err != nil {
			_ = s.js.DeleteStream(context.WithoutCancel(ctx), s.name)
			_ = s.js.DeleteStream(context.WithoutCancel(ctx), s.dlqName())
			return nil, err
		}
	}
	return s, nil
}

// createAdvisories captures the server's MAX_DELIVERIES advisories for this
// stream's consumers in a stream: they are the broker's dead letters
// (https://docs.nats.io/running-a-nats-service/nats_admin/monitoring/monitoring_jetstream#advisories).
func (s *Stream) createAdvisories(ctx context.Context) error {
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     s.advName(),
		Subjects: []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s.name + ".*"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("jetstream create stream %s: %w", s.advName(), err)
	}
	return nil
}

// createStream creates a file-backed stream keeping everything until
// trimmed. Creating one that exists with the same config succeeds.
func (s *Stream) createStream(ctx context.Context, name string, dupes time.Duration) error {
	_, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{subject(name)},
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Duplicates: dupes,
	})
	if err != nil {
		return fmt.Errorf("jetstream create stream %s: %w", name, err)
	}
	return nil
}

// sanitize maps name onto the characters NATS allows in stream, consumer
// and subject tokens everywhere: [A-Za-z0-9_-].
func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
}

// subject is the one subject of stream name.
func subject(name string) string { return name + ".events" }

func (s *Stream) dlqName() string { return s.name + dlqSuffix }

// dlqSuffix names a stream's dead-letter stream after it.
const dlqSuffix = "_dlq"

// advName is the stream of the server's MAX_DELIVERIES advisories.
func (s *Stream) advName() string { return s.name + "_adv" }

// Name is the JetStream stream name; the dead letters are in Name()+"_dlq".
func (s *Stream) Name() string { return s.name }

// Subject is the one subject the stream takes: what a relay publishes to.
func (s *Stream) Subject() string { return subject(s.name) }

// Placeholders tell a team's services the stream, its subject and, for
// consumer, its durable consumer's name.
func (s *Stream) Placeholders(_ context.Context, consumer string) (map[string]string, error) {
	return map[string]string{"stream_name": s.Name(), "subject": s.Subject(), "destination": s.Subject(), "group": Durable(consumer)}, nil
}

var _ broker.Named = (*Stream)(nil)

// Durable is the name of group g's durable consumer, as the Stream creates
// it and as a team's consumer should name its own.
func Durable(g string) string { return sanitize(g) }

// Capabilities: an entry log with retention and history, pending counts, and
// broker dedupe when Nats-Msg-Id is set. No idle-based claim, no pending list
// with idle times, no side store.
func (s *Stream) Capabilities() broker.Capabilities { return capsOf(s.opt) }

// capabilities are those of the stream a scenario's options make
// (Kind.Capabilities).
func capabilities(sc broker.Scenario) broker.Capabilities { return capsOf(options(sc)) }

func capsOf(opt Options) broker.Capabilities {
	cs := broker.Capabilities{
		broker.EntryLog: true, broker.PendingCount: true, broker.DeliveryCount: true,
		broker.Retention: true, broker.ReplayHistory: true, broker.Purge: true,
		broker.NativeDeadLetter: true, broker.GroupLag: true,
	}
	if opt.Dedupe {
		cs[broker.BrokerDedupe] = true
	}
	return cs
}

// unreachable says what nats.go's "outbound buffer limit exceeded" means
// here: the connection is down and reconnecting, and the runner's client
// buffers nothing meanwhile (ReconnectBufSize -1), so a publish fails at
// once instead of waiting in a buffer the server may never read.
func unreachable(err error) error {
	if errors.Is(err, nats.ErrReconnectBufExceeded) {
		return fmt.Errorf("the NATS server does not answer (the client is reconnecting and buffers nothing meanwhile): %w", err)
	}
	return err
}

// Publish publishes msgs one at a time, in order, each acknowledged by the
// server before the next. An entry id is the stream sequence; a publish the
// server recognised as a duplicate returns the original's sequence.
func (s *Stream) Publish(ctx context.Context, msgs []broker.Message) ([]string, error) {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ack, err := s.publish(ctx, m)
		if err != nil {
			return ids, fmt.Errorf("jetstream publish %s (event %s): %w", s.name, m.EventID, unreachable(err))
		}
		ids = append(ids, strconv.FormatUint(ack.Sequence, 10))
	}
	return ids, nil
}

// publish sends m and waits for its PubAck at most replyWait: a reply
// lost with its connection never comes, and a relay gives up on it rather
// than wait out the scenario.
func (s *Stream) publish(ctx context.Context, m broker.Message) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, replyWait)
	defer cancel()
	return s.js.PublishMsg(ctx, s.natsMsg(m), jetstream.WithExpectStream(s.name))
}

// replyWait bounds the wait for the server's answer to a request of the
// runner's (a PubAck, a Nak's answer): nats.go's JetStream default
// timeout (jetstream.New).
const replyWait = 5 * time.Second

func (s *Stream) natsMsg(m broker.Message) *nats.Msg {
	nm := nats.NewMsg(subject(s.name))
	nm.Header.Set(HeaderEventID, m.EventID)
	switch {
	case s.opt.Dedupe && m.Republish:
		// Deliberate: a fresh message id, or the window would swallow it.
		nm.Header.Set(HeaderMsgID, m.EventID+"/republish/"+nuid.Next())
	case s.opt.Dedupe:
		nm.Header.Set(HeaderMsgID, m.EventID)
	}
	nm.Data = []byte(m.Payload)
	return nm
}

// Trim purges all but the newest keep messages.
func (s *Stream) Trim(ctx context.Context, keep int) (int64, error) {
	st, err := s.stream(ctx, s.name)
	if err != nil {
		return 0, err
	}
	before := st.CachedInfo().State.Msgs
	// Keep 0 would be left out of the request, which then purges everything:
	// what keep 0 means anyway.
	if err := st.Purge(ctx, jetstream.WithPurgeKeep(uint64(max(keep, 0)))); err != nil {
		return 0, fmt.Errorf("jetstream purge %s (keep %d): %w", s.name, keep, err)
	}
	after, err := s.Entries(ctx)
	if err != nil {
		return 0, err
	}
	return int64(before) - after, nil
}

// stream looks stream name up; its CachedInfo is fresh from the lookup.
func (s *Stream) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("jetstream stream info %s: %w", name, err)
	}
	return st, nil
}

// Entries is the number of messages in the stream.
func (s *Stream) Entries(ctx context.Context) (int64, error) {
	st, err := s.stream(ctx, s.name)
	if err != nil {
		return 0, err
	}
	return int64(st.CachedInfo().State.Msgs), nil
}

// Events returns the event id of every message in the stream, in order.
func (s *Stream) Events(ctx context.Context) ([]string, error) {
	msgs, err := s.all(ctx, s.name)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.header.Get(HeaderEventID)
	}
	return ids, nil
}

// stored is one message as the stream holds it.
type stored struct {
	seq    uint64
	header nats.Header
	data   []byte
}

// all reads every message of stream name, up to the last one there when
// called, through a short-lived consumer: one round trip a batch, where a
// get by sequence costs one a message.
func (s *Stream) all(ctx context.Context, name string) ([]stored, error) {
	st, err := s.stream(ctx, name)
	if err != nil {
		return nil, err
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return nil, nil
	}
	c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckNonePolicy,
		MemoryStorage: true,
		// The server removes it should we die before deleting it.
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream read %s: create reader: %w", name, err)
	}
	defer st.DeleteConsumer(context.WithoutCancel(ctx), c.CachedInfo().Name)
	out, err := readUpTo(ctx, c, state.LastSeq, int(state.Msgs))
	if err != nil {
		return out, fmt.Errorf("jetstream read %s: %w", name, err)
	}
	return out, nil
}

// readUpTo pulls from c until sequence last, or until nothing is left (the
// stream was trimmed meanwhile).
func readUpTo(ctx context.Context, c jetstream.Consumer, last uint64, hint int) ([]stored, error) {
	out := make([]stored, 0, hint)
	for {
		msgs, err := fetch(ctx, c, pullBatch, 0)
		if err != nil || len(msgs) == 0 {
			return out, err
		}
		for _, m := range msgs {
			md, err := m.Metadata()
			if err != nil {
				return out, fmt.Errorf("message metadata: %w", err)
			}
			if md.Sequence.Stream > last {
				return out, nil
			}
			out = append(out, stored{seq: md.Sequence.Stream, header: m.Headers(), data: m.Data()})
			if md.Sequence.Stream == last {
				return out, nil
			}
		}
	}
}

// Delete deletes the consumers this Stream created, then its two streams.
// What is already gone is not an error.
func (s *Stream) Delete(ctx context.Context) error {
	var errs []error
	for _, g := range s.groupList() {
		err := s.js.DeleteConsumer(ctx, s.name, g.durable)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("jetstream delete consumer %s %s: %w", s.name, g.durable, err))
		}
	}
	for _, name := range []string{s.name, s.dlqName(), s.advName()} {
		if err := s.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("jetstream delete stream %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Pending is, per group, the messages delivered and not yet acknowledged:
// the consumer's NumAckPending, as the server counts it.
func (s *Stream) Pending(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, g := range s.groupList() {
		info, err := s.consumerInfo(ctx, g)
		if err != nil {
			return nil, err
		}
		out[g.name] = int64(info.NumAckPending)
	}
	return out, nil
}

// Lag counts, for every consumer of the stream (a team's too), the
// messages it has not finished with: not yet delivered (NumPending) and
// delivered but not acknowledged (NumAckPending), from its consumer info
// (https://docs.nats.io/nats-concepts/jetstream/consumers). A group the
// Stream made is named by its group name, any other by its consumer name.
func (s *Stream) Lag(ctx context.Context) (map[string]int64, error) {
	names := map[string]string{}
	for _, g := range s.groupList() {
		names[g.durable] = g.name
	}
	st, err := s.js.Stream(ctx, s.name)
	if err != nil {
		return nil, fmt.Errorf("jetstream stream %s: %w", s.name, err)
	}
	out := map[string]int64{}
	infos := st.ListConsumers(ctx)
	for info := range infos.Info() {
		name := info.Name
		if n, ok := names[name]; ok {
			name = n
		}
		out[name] = int64(info.NumPending) + int64(info.NumAckPending)
	}
	if err := infos.Err(); err != nil {
		return nil, fmt.Errorf("jetstream list consumers %s: %w", s.name, err)
	}
	return out, nil
}

// PendingStats: Redeliveries is the sum over the groups of NumRedelivered,
// which counts pending messages delivered more than once (not the extra
// deliveries themselves, as Redis does). OldestIdle is unknown to JetStream
// and stays 0.
func (s *Stream) PendingStats(ctx context.Context) (broker.PendingStats, error) {
	var st broker.PendingStats
	for _, g := range s.groupList() {
		info, err := s.consumerInfo(ctx, g)
		if err != nil {
			return st, err
		}
		st.Redeliveries += int64(info.NumRedelivered)
	}
	return st, nil
}

func (s *Stream) consumerInfo(ctx context.Context, g *group) (*jetstream.ConsumerInfo, error) {
	info, err := g.cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream consumer info %s %s: %w", s.name, g.durable, err)
	}
	return info, nil
}
