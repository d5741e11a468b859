package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
// one's producer.
type txnMember struct {
	t    *Topic
	key  memberKey
	sess *kgo.GroupTransactSession
}

// ReadInTxn begins a transaction and polls as worker (joining the group on
// first use; the output topic is created then).
func (t *Topic) ReadInTxn(ctx context.Context, group, worker string, count int, block time.Duration) (broker.Txn, []broker.Delivery, error) {
	m, err := t.txnMember(ctx, group, worker)
	if err != nil {
		return nil, nil, err
	}
	if err := m.sess.Begin(); err != nil {
		return nil, nil, fmt.Errorf("kafka begin transaction as %s/%s: %w", group, worker, err)
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

func (t *Topic) txnMember(ctx context.Context, group, worker string) (*txnMember, error) {
	k := memberKey{group, "txn:" + worker}
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.txns[k]; m != nil {
		return m, nil
	}
	if err := t.createTopic(ctx, t.outName()); err != nil {
		return nil, err
	}
	if !slices.Contains(t.groups, group) {
		t.groups = append(t.groups, group)
	}
	joined := make(chan struct{})
	var once bool
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(t.seeds...),
		kgo.TransactionalID(t.groupID(group)+"."+worker),
		kgo.ConsumerGroup(t.groupID(group)),
		kgo.ConsumeTopics(t.name),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(t.opt.Session),
		kgo.HeartbeatInterval(t.opt.Session/4),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			if !once {
				once = true
				close(joined)
			}
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("kafka transactional session for %s/%s: %w", group, worker, err)
	}
	select {
	case <-joined:
	case <-ctx.Done():
		sess.Close()
		return nil, context.Cause(ctx)
	case <-time.After(joinWait):
		sess.Close()
		return nil, fmt.Errorf("kafka: worker %s did not join group %s within %s", worker, t.groupID(group), joinWait)
	}
	m := &txnMember{t: t, key: k, sess: sess}
	t.txns[k] = m
	return m, nil
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

// Crash ends the worker with its transaction open. The runner aborts it
// for the dead worker (EndTxn abort), so the drill does not wait: a killed
// process's open transaction is aborted by the broker when the restarted
// worker's producer (same transactional.id) fences it, or when
// transaction.timeout.ms runs out. Either way neither its outputs nor its
// offsets count.
func (m *txnMember) Crash(ctx context.Context) error {
	m.t.mu.Lock()
	delete(m.t.txns, m.key)
	m.t.mu.Unlock()
	_, err := m.sess.End(ctx, kgo.TryAbort)
	m.sess.Close()
	if err != nil {
		return fmt.Errorf("kafka abort transaction as %s/%s: %w", m.key.group, m.key.worker, err)
	}
	return nil
}

// Outputs lists the output's event ids as a read_committed reader sees them.
func (t *Topic) Outputs(ctx context.Context) ([]string, error) {
	recs, err := t.read(ctx, t.outName(), kgo.ReadCommitted())
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = string(r.Key)
	}
	return ids, err
}
