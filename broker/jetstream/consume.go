package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
)

const (
	// pullBatch bounds one pull when a caller asks for "all new entries".
	pullBatch = 256
	// claimMargin is how long past AckWait Claim waits for the server to
	// redeliver: its ack timer and our clock are not in step.
	claimMargin = 500 * time.Millisecond
	// claimRetry is the pause after a pull answered with new messages only:
	// the server has not queued the redeliveries yet.
	claimRetry = 20 * time.Millisecond
	// minWait is the shortest pull worth sending with a wait; below it the
	// client refuses the deadline, so the pull takes what is there.
	minWait = 10 * time.Millisecond
)

// group is one consumer group: a durable pull consumer, and the client
// state a real worker keeps beside it: the message to ack or nak for each
// delivery it received (a handle, not a record of the broker's state; it
// dies with the worker, see Crash).
type group struct {
	name    string // as the caller named it
	durable string // the consumer's name
	cons    jetstream.Consumer
	// handles are, by stream sequence, the deliveries of the message the
	// latest read handed out, oldest first: a read that waits can get a
	// message again when its AckWait runs out meanwhile, and the caller
	// settles each delivery, in the order it was handed them, with its own
	// message. Guarded by Stream.mu.
	handles map[uint64][]handle
	acked   map[uint64]struct{} // acknowledged sequences, so a second Ack is a no-op as XACK's is
}

// handle is one delivery of a message to a worker of the group.
type handle struct {
	msg    jetstream.Msg
	worker string
	read   uint64 // the Read or Claim that handed it out
}

func delivery(m jetstream.Msg, seq uint64, n int) broker.Delivery {
	return broker.Delivery{
		ID:         strconv.FormatUint(seq, 10),
		EventID:    m.Headers().Get(HeaderEventID),
		Payload:    string(m.Data()),
		Deliveries: n,
	}
}

// group returns the consumer group name, creating its durable on first use.
// It delivers from the stream's first message, so a late group reads the
// whole history.
func (s *Stream) group(ctx context.Context, name string) (*group, error) {
	durable := sanitize(name)
	if g, err := s.knownGroup(name, durable); g != nil || err != nil {
		return g, err
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.name, jetstream.ConsumerConfig{
		Durable:       durable,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.opt.AckWait,
		MaxDeliver:    maxDeliver(s.opt.MaxDeliver),
		MaxAckPending: -1, // the default (1000) would stall a large unacknowledged backlog
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream create consumer %s %s: %w", s.name, durable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[name]; g != nil { // a concurrent first use won
		return g, nil
	}
	g := &group{name: name, durable: durable, cons: cons, handles: map[uint64][]handle{}, acked: map[uint64]struct{}{}}
	s.groups[name] = g
	return g, nil
}

// knownGroup returns the group if it exists, or an error if another group
// name sanitizes to the same consumer name.
func (s *Stream) knownGroup(name, durable string) (*group, error) {
	if strings.Trim(durable, "_") == "" {
		return nil, fmt.Errorf("jetstream: group name %q has no usable character", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[name]; g != nil {
		return g, nil
	}
	for _, g := range s.groups {
		if g.durable == durable {
			return nil, fmt.Errorf("jetstream: groups %q and %q share the consumer name %s", g.name, name, durable)
		}
	}
	return nil, nil
}

func (s *Stream) groupList() []*group {
	s.mu.Lock()
	defer s.mu.Unlock()
	gs := make([]*group, 0, len(s.groups))
	for _, g := range s.groups {
		gs = append(gs, g)
	}
	return gs
}

// Read is a pull: worker gets up to count messages (count <= 0: all there
// are), whatever the server delivers to it — new ones, and redeliveries of
// messages whose AckWait ran out or that were nakked — waiting at most
// block for the first. A message delivered twice within the read is in it
// twice, each delivery with the server's count.
func (s *Stream) Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]broker.Delivery, error) {
	g, err := s.group(ctx, group)
	if err != nil {
		return nil, err
	}
	read := s.nextRead()
	var out []broker.Delivery
	deadline := time.Now().Add(block)
	for count <= 0 || len(out) < count {
		n := pullBatch
		if count > 0 {
			n = min(n, count-len(out))
		}
		ds, err := s.pull(ctx, g, n, 0, worker, read)
		out = append(out, ds...)
		switch {
		case err != nil:
			return out, err
		case len(ds) == n:
			continue // a full batch: there may be more
		case len(out) > 0 || time.Until(deadline) < minWait:
			return out, nil
		}
		// Nothing yet: wait for one message, then take the rest as above.
		// The server ends the wait a little early; the loop waits out the rest.
		ds, err = s.pull(ctx, g, 1, time.Until(deadline), worker, read)
		out = append(out, ds...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// Claim takes over what the group's workers left unacknowledged. JetStream
// gives a delivered message to another pull only once its AckWait has run
// out (or it was nakked), so Claim pulls, waiting up to AckWait plus a
// margin, until it has as many distinct messages as the server counts
// unacknowledged (NumAckPending, at most count) — a pull also hands out new
// messages, which Claim then returns too, and a message whose AckWait runs
// out again during the wait comes back as a delivery of its own: that is
// what the server delivered. minIdle cannot be honoured below AckWait (no
// ClaimByIdle).
func (s *Stream) Claim(ctx context.Context, group, worker string, _ time.Duration, count int) ([]broker.Delivery, error) {
	g, err := s.group(ctx, group)
	if err != nil {
		return nil, err
	}
	info, err := s.consumerInfo(ctx, g)
	if err != nil {
		return nil, err
	}
	want := info.NumAckPending
	if count > 0 {
		want = min(want, count)
	}
	if want <= 0 {
		return nil, nil
	}
	read := s.nextRead()
	var out []broker.Delivery
	deadline := time.Now().Add(s.opt.AckWait + claimMargin)
	for distinct(out) < want && time.Until(deadline) >= minWait {
		ds, err := s.pull(ctx, g, want-distinct(out), time.Until(deadline), worker, read)
		out = append(out, ds...)
		if err != nil {
			return out, err
		}
		if len(ds) == 0 {
			if err := sleepUntil(ctx, time.Now().Add(claimRetry)); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// distinct counts the messages among ds: a redelivery of one is no other.
func distinct(ds []broker.Delivery) int {
	seen := make(map[string]bool, len(ds))
	for _, d := range ds {
		seen[d.ID] = true
	}
	return len(seen)
}

func (s *Stream) nextRead() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.reads
}

// AutoClaim is Claim: JetStream has no scan of its own to tell apart.
func (s *Stream) AutoClaim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	return s.Claim(ctx, group, worker, minIdle, count)
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pull fetches up to n messages for g, waiting up to wait for the batch
// to fill (below minWait: only what is there now), and keeps their handles
// for worker as handed out by read.
func (s *Stream) pull(ctx context.Context, g *group, n int, wait time.Duration, worker string, read uint64) ([]broker.Delivery, error) {
	msgs, err := fetch(ctx, g.cons, n, wait)
	ds, herr := s.keep(g, msgs, worker, read)
	if err = errors.Join(err, herr); err != nil {
		return ds, fmt.Errorf("jetstream pull %s %s: %w", s.name, g.durable, err)
	}
	return ds, nil
}

// fetch is one pull request. A pull that waits stops at wait or when ctx is
// done; one that does not is answered by the server at once.
func fetch(ctx context.Context, c jetstream.Consumer, n int, wait time.Duration) ([]jetstream.Msg, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var batch jetstream.MessageBatch
	var err error
	if wait < minWait {
		batch, err = c.FetchNoWait(n)
	} else {
		fctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		batch, err = c.Fetch(n, jetstream.FetchContext(fctx))
	}
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	err = batch.Error()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = nil // our own wait ran out before the server said so
	}
	return msgs, err
}

// keep records the handle of each pulled message for worker and returns
// the deliveries, as the server numbered them. A message read delivers
// again is queued behind its earlier delivery of the same read; a handle
// an earlier read left (a delivery the worker kept) is superseded: the
// worker settles what it was handed last.
func (s *Stream) keep(g *group, msgs []jetstream.Msg, worker string, read uint64) ([]broker.Delivery, error) {
	var out []broker.Delivery
	var errs []error
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			errs = append(errs, fmt.Errorf("message metadata: %w", err))
			continue
		}
		seq := md.Sequence.Stream
		hs := g.handles[seq]
		if len(hs) > 0 && hs[0].read != read {
			hs = nil
		}
		g.handles[seq] = append(hs, handle{msg: m, worker: worker, read: read})
		out = append(out, delivery(m, seq, int(md.NumDelivered)))
	}
	return out, errors.Join(errs...)
}

// Ack acknowledges ids in group and waits for the server to confirm each,
// so an ack is durable before Ack returns. Acking an id again is a no-op;
// an id this Stream never delivered to the group is an error.
func (s *Stream) Ack(ctx context.Context, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	g, err := s.group(ctx, group)
	if err != nil {
		return err
	}
	var unknown []string
	for _, id := range ids {
		seq, msg, known := s.take(g, id)
		if msg == nil {
			if !known {
				unknown = append(unknown, id)
			}
			continue
		}
		if err := msg.DoubleAck(ctx); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return fmt.Errorf("jetstream ack %s %s entry %s (event %s): %w", s.name, g.durable, id, msg.Headers().Get(HeaderEventID), err)
		}
		s.markAcked(g, seq)
	}
	if len(unknown) > 0 {
		return fmt.Errorf("jetstream ack %s %s: entries %s were never delivered to this group", s.name, g.durable, strings.Join(unknown, ", "))
	}
	return nil
}

// take removes and returns the oldest unsettled delivery of id; known is
// also true for an id already acked, which has none.
func (s *Stream) take(g *group, id string) (seq uint64, msg jetstream.Msg, known bool) {
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if hs := g.handles[seq]; len(hs) > 0 {
		if len(hs) == 1 {
			delete(g.handles, seq)
		} else {
			g.handles[seq] = hs[1:]
		}
		return seq, hs[0].msg, true
	}
	_, acked := g.acked[seq]
	return seq, nil, acked
}

func (s *Stream) markAcked(g *group, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.acked[seq] = struct{}{}
}

// Nack asks the server to redeliver ids now (Nak), and waits until it
// has: the Nak goes as a request, which the server answers once it
// processed it (as DoubleAck does for an ack). A Nak only published could
// still be on its way when the next pull arrives, which then gets the
// entries after it first.
func (s *Stream) Nack(ctx context.Context, group string, ids ...string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	g, err := s.group(ctx, group)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, msg, _ := s.take(g, id); msg != nil { // given back: its next delivery brings a new handle
			if err := s.nak(ctx, msg); err != nil {
				return fmt.Errorf("jetstream nak %s %s entry %s: %w", s.name, g.durable, id, err)
			}
		}
	}
	return nil
}

// nak sends msg's Nak as a request and waits (at most replyWait) for
// the server's answer.
func (s *Stream) nak(ctx context.Context, msg jetstream.Msg) error {
	ctx, cancel := context.WithTimeout(ctx, replyWait)
	defer cancel()
	_, err := s.js.Conn().RequestWithContext(ctx, msg.Reply(), []byte("-NAK"))
	return err
}

// Crash: the worker's process dies with its handles; the server redelivers
// what it held once AckWait runs out, to whoever pulls.
func (s *Stream) Crash(ctx context.Context, group, worker string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[group]; g != nil {
		for seq, hs := range g.handles {
			if hs = slices.DeleteFunc(hs, func(h handle) bool { return h.worker == worker }); len(hs) == 0 {
				delete(g.handles, seq)
			} else {
				g.handles[seq] = hs
			}
		}
	}
	return ctx.Err()
}

// maxDeliver is the consumer's MaxDeliver: -1, unlimited, without a broker DLQ.
func maxDeliver(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
