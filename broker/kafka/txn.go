package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/broker"
)

// Broker transactions (Kafka's exactly-once read-process-write): a worker
// reads through a GroupTransactSession, produces to the topic's output
// (Name()+".out") and commits the group's offsets in the same Kafka
// transaction. Readers of the output that see only committed transactions
// (read_committed) see all of it or none. The consumer's PostgreSQL
// transaction is outside it: that is what the drill shows.

var _ broker.Transactions = (*Topic)(nil)

func (t *Topic) outName() string { return t.name + ".out" }

// txnMember is a worker reading in transactions: its own session, whose
// transactional id is the worker's, so a restarted worker fences the dead
// one's producer. Its connections go through net, which its crash cuts.
type txnMember struct {
	t     *Topic
	key   memberKey
	txnID string
	sess  *kgo.GroupTransactSession
	net   *cutter
	notes []string // of the current transaction
}

// ReadInTxn begins a transaction and polls as worker (joining the group on
// first use; the output topic is created then). Before it polls it waits,
// as long as the broker takes to end it, for a transaction another worker
// left open holding the group's offsets: until then no member can know
// where to read from (KIP-447).
func (t *Topic) ReadInTxn(ctx context.Context, group, worker string, count int, block time.Duration) (broker.Txn, []broker.Delivery, error) {
	m, notes, err := t.txnMember(ctx, group, worker)
	if err != nil {
		return nil, nil, err
	}
	m.notes = notes
	if err := m.sess.Begin(); err != nil {
		return nil, nil, fmt.Errorf("kafka begin transaction as %s/%s: %w", group, worker, err)
	}
	if err := m.awaitStable(ctx); err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, max(block, settle))
	defer cancel()
	fs := m.sess.PollRecords(pctx, count)
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var ds []broker.Delivery
	fs.EachRecord(func(r *kgo.Record) {
		ds = append(ds, broker.Delivery{ID: entryID(r.Partition, r.Offset), EventID: string(r.Key), Payload: string(r.Value)})
	})
	return m, ds, nil
}

// txnMember returns the worker's transactional member, starting it on
// first use as a transactional worker starts: its producer first
// (InitProducerId, Java's initTransactions), which fences a dead
// predecessor with the same transactional id, then its group membership.
// notes say what starting it met.
func (t *Topic) txnMember(ctx context.Context, group, worker string) (*txnMember, []string, error) {
	k := memberKey{group, "txn:" + worker}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.txns[k]; m != nil {
		return m, nil, nil
	}
	if err := t.createTopic(ctx, t.outName()); err != nil {
		return nil, nil, err
	}
	if !slices.Contains(t.groups, group) {
		t.groups = append(t.groups, group)
	}
	m := &txnMember{t: t, key: k, txnID: t.groupID(group) + "." + worker, net: newCutter()}
	members, err := t.groupMembers(ctx, group) // before this one joins: the dead ones
	if err != nil {
		return nil, nil, err
	}
	joined := make(chan struct{})
	var once bool
	sess, err := kgo.NewGroupTransactSession(append(m.opts(group),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			if !once {
				once = true
				close(joined)
			}
		}))...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka transactional session for %s/%s: %w", group, worker, err)
	}
	m.sess = sess
	notes, err := m.start(ctx, joined, members)
	if err != nil {
		sess.Close()
		return nil, nil, err
	}
	t.txns[k] = m
	return m, notes, nil
}

func (m *txnMember) opts(group string) []kgo.Opt {
	t := m.t
	return []kgo.Opt{
		kgo.SeedBrokers(t.seeds...),
		kgo.Dialer(m.net.dial),
		kgo.TransactionalID(m.txnID),
		kgo.TransactionTimeout(t.opt.TxnTimeout),
		kgo.ConsumerGroup(t.groupID(group)),
		kgo.ConsumeTopics(t.name),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(t.opt.Session),
		kgo.HeartbeatInterval(t.opt.Session / 4),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
}

// start loads the producer id, then waits for the group to assign the
// member its partitions; members are those the group had before (only
// dead ones: the live ones are this Topic's).
func (m *txnMember) start(ctx context.Context, joined <-chan struct{}, members int) ([]string, error) {
	var notes []string
	open, err := m.t.openTxn(ctx, m.txnID)
	if err != nil { // only what the trace says depends on it
		notes = append(notes, fmt.Sprintf("whether transactional id %s had a transaction open is not known: %v", m.txnID, err))
	}
	if _, _, err := m.sess.Client().ProducerID(ctx); err != nil {
		return nil, fmt.Errorf("kafka init producer %s: %w", m.txnID, err)
	}
	if open {
		notes = append(notes, fmt.Sprintf("the transactional id %s still had a transaction open (a crashed worker's): this worker's InitProducerId fenced it and the broker aborted it", m.txnID))
	}
	start := time.Now()
	select {
	case <-joined:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-time.After(joinWait):
		return nil, fmt.Errorf("kafka: worker %s did not join group %s within %s", m.key.worker, m.t.groupID(m.key.group), joinWait)
	}
	if members > 0 {
		notes = append(notes, fmt.Sprintf("joined group %s after %s: it still had %d member(s) no live worker is (crashed without leaving), kept until their session (%s) ran out",
			m.t.groupID(m.key.group), time.Since(start).Round(time.Millisecond), members, m.t.opt.Session))
	}
	return notes, nil
}

// Emit produces d to the output inside the transaction.
func (m *txnMember) Emit(ctx context.Context, d broker.Delivery) error {
	r := &kgo.Record{Topic: m.t.outName(), Key: []byte(d.EventID), Value: []byte(d.Payload)}
	if err := m.sess.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("kafka produce %s in a transaction: %w", m.t.outName(), err)
	}
	return nil
}

// Commit commits the outputs together with the offsets of what was polled.
func (m *txnMember) Commit(ctx context.Context) error {
	committed, err := m.sess.End(ctx, kgo.TryCommit)
	if err == nil && !committed {
		err = fmt.Errorf("the broker aborted it (the group rebalanced)")
	}
	if err != nil {
		return fmt.Errorf("kafka commit transaction as %s/%s: %w", m.key.group, m.key.worker, err)
	}
	return nil
}

// Abort ends the transaction (EndTxn abort); the session goes back to the
// group's committed offsets for the worker's next transaction.
func (m *txnMember) Abort(ctx context.Context) error {
	if _, err := m.sess.End(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("kafka abort transaction as %s/%s: %w", m.key.group, m.key.worker, err)
	}
	m.notes = append(m.notes, "aborted the transaction (EndTxn abort)")
	return nil
}

// Notes are what the broker made the current transaction wait for, and
// how it ended.
func (m *txnMember) Notes() []string { return slices.Clone(m.notes) }

// Outputs lists the output's event ids as a read_committed reader sees them.
func (t *Topic) Outputs(ctx context.Context) ([]string, error) {
	recs, err := t.read(ctx, t.outName(), kgo.ReadCommitted())
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = string(r.Key)
	}
	return ids, err
}

// openTxn reports whether transactional id id has a transaction open.
func (t *Topic) openTxn(ctx context.Context, id string) (bool, error) {
	ds, err := t.adm.DescribeTransactions(ctx, id)
	if err != nil {
		return false, fmt.Errorf("kafka describe transaction %s: %w", id, err)
	}
	d, ok := ds[id]
	switch {
	case !ok, errors.Is(d.Err, kerr.TransactionalIDNotFound):
		return false, nil
	case d.Err != nil:
		return false, fmt.Errorf("kafka describe transaction %s: %w", id, d.Err)
	}
	return d.State == "Ongoing", nil
}

// groupMembers counts the members the broker lists in group.
func (t *Topic) groupMembers(ctx context.Context, group string) (int, error) {
	ds, err := t.adm.DescribeGroups(ctx, t.groupID(group))
	if err != nil {
		return 0, fmt.Errorf("kafka describe group %s: %w", t.groupID(group), err)
	}
	d := ds[t.groupID(group)]
	if d.Err != nil && !errors.Is(d.Err, kerr.GroupIDNotFound) {
		return 0, fmt.Errorf("kafka describe group %s: %w", t.groupID(group), d.Err)
	}
	return len(d.Members), nil
}

// awaitStable waits while the broker answers UNSTABLE_OFFSET_COMMIT for the
// group's offsets on the topic: a transaction holding offsets of the group
// is open (KIP-447), and no member can start reading before the broker
// ends it — at its transaction timeout, for a worker that died in it.
func (m *txnMember) awaitStable(ctx context.Context) error {
	g := m.t.groupID(m.key.group)
	start := time.Now()
	deadline := start.Add(m.t.opt.TxnTimeout + rebalanceMargin)
	for waited := false; ; waited = true {
		unstable, err := m.t.unstable(ctx, g)
		switch {
		case err != nil:
			return err
		case !unstable:
			if waited {
				m.notes = append(m.notes, fmt.Sprintf("waited %s for group %s's offsets to become stable: a transaction holding them stayed open until the broker ended it (transaction timeout %s)",
					time.Since(start).Round(time.Millisecond), g, m.t.opt.TxnTimeout))
			}
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("kafka: group %s's offsets still unstable after %s (transaction timeout %s)", g, time.Since(start).Round(time.Millisecond), m.t.opt.TxnTimeout)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unstable reports whether the broker answers UNSTABLE_OFFSET_COMMIT for
// group g's offsets on the topic's partitions. They are named: asked for
// all its offsets, a group that never committed any lists none.
func (t *Topic) unstable(ctx context.Context, g string) (bool, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = g, true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = t.name
	for p := range int32(t.opt.Partitions) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.prod)
	if err != nil {
		return false, fmt.Errorf("kafka fetch offsets of %s: %w", g, err)
	}
	codes := []int16{resp.ErrorCode}
	for _, rt := range resp.Topics { // before v8
		for _, p := range rt.Partitions {
			codes = append(codes, p.ErrorCode)
		}
	}
	for _, rg := range resp.Groups { // v8 on
		codes = append(codes, rg.ErrorCode)
		for _, rt := range rg.Topics {
			for _, p := range rt.Partitions {
				codes = append(codes, p.ErrorCode)
			}
		}
	}
	for _, c := range codes {
		switch err := kerr.ErrorForCode(c); {
		case errors.Is(err, kerr.UnstableOffsetCommit):
			return true, nil
		case err != nil && !errors.Is(err, kerr.GroupIDNotFound):
			return false, fmt.Errorf("kafka fetch offsets of %s: %w", g, err)
		}
	}
	return false, nil
}
