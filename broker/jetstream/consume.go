package jetstream

import (
	"cmp"
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

// group is one consumer group: a durable pull consumer and the messages it
// delivered that are not acknowledged yet.
type group struct {
	name    string // as the caller named it
	durable string // the consumer's name
	cons    jetstream.Consumer
	entries map[uint64]*entry   // by stream sequence; guarded by Stream.mu
	acked   map[uint64]struct{} // acknowledged sequences, so a second Ack is a no-op as XACK's is
}

// entry is the latest delivery of one message to the group.
type entry struct {
	msg        jetstream.Msg
	seq        uint64
	deliveries int
	redelivery bool      // already handed to a worker once (or, unknown to us, delivered before)
	held       bool      // pulled but not handed out: waits for the Read or Claim it belongs to
	handedAt   time.Time // when last handed to a worker; zero if never
	worker     string    // who got it last; JetStream itself does not know
}

func (e *entry) delivery() broker.Delivery {
	return broker.Delivery{
		ID:         strconv.FormatUint(e.seq, 10),
		EventID:    e.msg.Headers().Get(HeaderEventID),
		Payload:    string(e.msg.Data()),
		Deliveries: e.deliveries,
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
		MaxDeliver:    -1,
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
	g := &group{name: name, durable: durable, cons: cons, entries: map[uint64]*entry{}, acked: map[uint64]struct{}{}}
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

// Read hands worker up to count messages never handed to a worker before
// (count <= 0: all there are), waiting at most block for the first.
// Redeliveries pulled on the way are held for the next Claim.
func (s *Stream) Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]broker.Delivery, error) {
	g, err := s.group(ctx, group)
	if err != nil {
		return nil, err
	}
	out := s.takeHeld(g, false, count, worker)
	deadline := time.Now().Add(block)
	for count <= 0 || len(out) < count {
		n := pullBatch
		if count > 0 {
			n = min(n, count-len(out))
		}
		got, ds, err := s.pull(ctx, g, n, 0, false, worker)
		out = merge(out, ds)
		switch {
		case err != nil:
			return out, err
		case got == n:
			continue // a full batch: there may be more
		case len(out) > 0 || time.Until(deadline) < minWait:
			return out, nil
		}
		// Nothing new yet: wait for one message, then take the rest as above.
		// The server ends the wait a little early; the loop waits out the rest.
		_, ds, err = s.pull(ctx, g, 1, time.Until(deadline), false, worker)
		out = merge(out, ds)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// Claim hands worker up to count messages the server redelivered (count <=
// 0: all). JetStream redelivers a message only once AckWait has passed since
// its delivery, and only to a pull, so Claim ignores minIdle: it takes as
// many as were pending when called (and handed out), waiting up to AckWait
// plus a margin for them. New messages pulled on the way are held for Read.
func (s *Stream) Claim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	g, err := s.group(ctx, group)
	if err != nil {
		return nil, err
	}
	info, err := s.consumerInfo(ctx, g)
	if err != nil {
		return nil, err
	}
	want := info.NumAckPending - s.neverHanded(g)
	if count > 0 {
		want = min(want, count)
	}
	if want <= 0 {
		return nil, nil
	}
	out := s.takeHeld(g, true, want, worker)
	start := time.Now()
	// Pulling before the server queued the redeliveries would pull new
	// messages instead; wait until the ones we handed out are due.
	if err := sleepUntil(ctx, s.dueAt(g, want-len(out), start.Add(s.opt.AckWait))); err != nil {
		return out, err
	}
	deadline := start.Add(s.opt.AckWait + claimMargin)
	for len(out) < want && time.Until(deadline) >= minWait {
		got, ds, err := s.pull(ctx, g, want-len(out), time.Until(deadline), true, worker)
		out = merge(out, ds)
		if err != nil {
			return out, err
		}
		if len(ds) < got {
			if err := sleepUntil(ctx, time.Now().Add(claimRetry)); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// merge appends ds to out, replacing a delivery of the same entry: a
// message held longer than AckWait comes back while being handed out, and
// the caller must get it once, with its latest delivery count.
func merge(out, ds []broker.Delivery) []broker.Delivery {
	at := make(map[string]int, len(out))
	for i, d := range out {
		at[d.ID] = i
	}
	for _, d := range ds {
		if i, ok := at[d.ID]; ok {
			out[i] = d
			continue
		}
		at[d.ID] = len(out)
		out = append(out, d)
	}
	return out
}

// AutoClaim is Claim: JetStream has no scan of its own to tell apart.
func (s *Stream) AutoClaim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	return s.Claim(ctx, group, worker, minIdle, count)
}

// dueAt is when the server redelivers the n-th oldest message handed out
// and not yet acknowledged or reclaimed (our hand-out time is after the
// server's delivery time, so no earlier than that). Without n such
// messages it is limit; it is never later than limit.
func (s *Stream) dueAt(g *group, n int, limit time.Time) time.Time {
	if n <= 0 {
		return time.Time{}
	}
	s.mu.Lock()
	var times []time.Time
	for _, e := range g.entries {
		if !e.held && !e.handedAt.IsZero() {
			times = append(times, e.handedAt)
		}
	}
	s.mu.Unlock()
	if len(times) < n {
		return limit
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	due := times[n-1].Add(s.opt.AckWait)
	if due.After(limit) {
		return limit
	}
	return due
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

// pull fetches up to n messages for g, waiting up to wait for the batch to
// fill (below minWait: only what is there now). It returns how many came,
// and hands worker those that are redeliveries if redeliveries is set, new
// ones if not; the others are held.
func (s *Stream) pull(ctx context.Context, g *group, n int, wait time.Duration, redeliveries bool, worker string) (int, []broker.Delivery, error) {
	msgs, err := fetch(ctx, g.cons, n, wait)
	ds, aerr := s.admit(g, msgs, redeliveries, worker)
	if err = errors.Join(err, aerr); err != nil {
		return len(msgs), ds, fmt.Errorf("jetstream pull %s %s: %w", s.name, g.durable, err)
	}
	return len(msgs), ds, nil
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

// admit records pulled messages and hands worker the kind it asked for.
func (s *Stream) admit(g *group, msgs []jetstream.Msg, redeliveries bool, worker string) ([]broker.Delivery, error) {
	var out []broker.Delivery
	var errs []error
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		md, err := m.Metadata()
		if err != nil {
			errs = append(errs, fmt.Errorf("message metadata: %w", err))
			continue
		}
		seq := md.Sequence.Stream
		e := g.entries[seq]
		if e == nil {
			e = &entry{seq: seq, redelivery: md.NumDelivered > 1}
			g.entries[seq] = e
		} else {
			e.redelivery = !e.handedAt.IsZero()
		}
		e.msg, e.deliveries = m, int(md.NumDelivered)
		e.held = e.redelivery != redeliveries
		if !e.held {
			e.handedAt, e.worker = now, worker
			out = append(out, e.delivery())
		}
	}
	return out, errors.Join(errs...)
}

// takeHeld hands worker up to limit held messages of the kind asked for
// (limit <= 0: all), oldest first.
func (s *Stream) takeHeld(g *group, redeliveries bool, limit int, worker string) []broker.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var es []*entry
	for _, e := range g.entries {
		if e.held && e.redelivery == redeliveries {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	if limit > 0 && len(es) > limit {
		es = es[:limit]
	}
	out := make([]broker.Delivery, len(es))
	now := time.Now()
	for i, e := range es {
		e.held, e.handedAt, e.worker = false, now, worker
		out[i] = e.delivery()
	}
	return out
}

// neverHanded counts the messages g pulled but never handed to a worker:
// pending to the server, not to the pipeline.
func (s *Stream) neverHanded(g *group) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range g.entries {
		if e.handedAt.IsZero() {
			n++
		}
	}
	return n
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
		seq, msg, known := s.lookup(g, id)
		if msg == nil {
			if !known {
				unknown = append(unknown, id)
			}
			continue
		}
		if err := msg.DoubleAck(ctx); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return fmt.Errorf("jetstream ack %s %s entry %s (event %s): %w", s.name, g.durable, id, msg.Headers().Get(HeaderEventID), err)
		}
		s.forget(g, seq)
	}
	if len(unknown) > 0 {
		return fmt.Errorf("jetstream ack %s %s: entries %s were never delivered to this group", s.name, g.durable, strings.Join(unknown, ", "))
	}
	return nil
}

// lookup finds the latest delivery of id; known is also true for an id
// already acked, which has none.
func (s *Stream) lookup(g *group, id string) (seq uint64, msg jetstream.Msg, known bool) {
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0, nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := g.entries[seq]; e != nil {
		return seq, e.msg, true
	}
	_, acked := g.acked[seq]
	return seq, nil, acked
}

func (s *Stream) forget(g *group, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(g.entries, seq)
	g.acked[seq] = struct{}{}
}

// Nack asks the server to redeliver ids now (Nak).
func (s *Stream) Nack(ctx context.Context, group string, ids ...string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	g, err := s.group(ctx, group)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, msg, _ := s.lookup(g, id); msg != nil {
			if err := msg.Nak(); err != nil {
				return fmt.Errorf("jetstream nak %s %s entry %s: %w", s.name, g.durable, id, err)
			}
		}
	}
	return nil
}

// Crash: the server redelivers what the worker held after AckWait.
func (s *Stream) Crash(ctx context.Context, group, worker string) error { return ctx.Err() }
