package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/broker"
)

// Share groups (KIP-932, Options.Share): the broker hands each record to
// one member under an acquisition lock and counts its deliveries; a member
// accepts (Ack), releases (Nack: redelivered, to any member, with the count
// raised) or loses it with its connection (Crash: released at once). What
// a member was handed and did not settle is accepted by its next poll
// (franz-go, like the Java client's implicit mode): a failed record the
// worker keeps (nack: false) is therefore acknowledged by the next read.
// And a record released group.share.delivery.count.limit times (5 by
// default) is archived by the broker: never delivered again, written
// nowhere. Neither shows in the worker's own acks, so Reach reads what the
// broker will still deliver from its share-partition state.

// shareOpts: a member of the topic's share group.
func (t *Topic) shareOpts(m *member) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(t.seeds...),
		kgo.ShareGroup(t.groupID(m.key.group)), // the topic is added paused (member)
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.ShareAckCallback(m.noteAcks),
		kgo.WithHooks(&strayHook{m: m}),
	}
}

// noteAcks keeps, by partition, the acknowledgements of the member that
// did not take (the broker refused them, or the client could not deliver
// them): without a callback franz-go drops those silently, and an ack
// the worker believes done, or a release it believes redelivered, was not.
func (m *member) noteAcks(_ *kgo.Client, rs kgo.ShareAckResults) {
	m.ackMu.Lock()
	defer m.ackMu.Unlock()
	for _, r := range rs {
		if r.Err != nil && r.Topic == m.t.name {
			if m.refused == nil {
				m.refused = map[int32]error{}
			}
			m.refused[r.Partition] = r.Err
		}
	}
}

// takeRefused returns and forgets what the broker refused since the last call.
func (m *member) takeRefused() map[int32]error {
	m.ackMu.Lock()
	defer m.ackMu.Unlock()
	out := m.refused
	m.refused = nil
	return out
}

// startAtEarliest sets the share group's share.auto.offset.reset to
// earliest (the default, latest, would skip what was published before the
// group's first member joined: a late group reads history, as elsewhere).
func (t *Topic) startAtEarliest(ctx context.Context, group string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	r.ResourceName = t.groupID(group)
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet
	earliest := "earliest"
	c.Value = &earliest
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, t.prod)
	if err != nil {
		return fmt.Errorf("kafka share group %s: set share.auto.offset.reset: %w", r.ResourceName, err)
	}
	for _, rr := range resp.Resources {
		if err := kerr.ErrorForCode(rr.ErrorCode); err != nil {
			return fmt.Errorf("kafka share group %s: set share.auto.offset.reset: %w", r.ResourceName, err)
		}
	}
	return nil
}

// flushShareAcks sends a share member's pending acknowledgements: a poll
// accepts what the previous one handed out and the worker did not settle
// (franz-go, as the Java client's implicit mode). The next fetch would
// carry them anyway; flushed at once, what the broker says afterwards
// (Reach) includes them. What the broker refuses of them is not the
// poll's failure: those are the client's acknowledgements, not the
// worker's, and a record whose accept was refused (its lock ran out) is
// the broker's to deliver again, which the reads and Reach show.
func (m *member) flushShareAcks(ctx context.Context) error {
	if !m.t.opt.Share {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	m.ackSeq.Lock()
	defer m.ackSeq.Unlock()
	if err := m.cl.FlushAcks(fctx); err != nil {
		return fmt.Errorf("kafka share acks of %s as %s/%s: %w", m.t.name, m.key.group, m.key.worker, err)
	}
	m.takeRefused()
	return nil
}

// settle acknowledges the member's records offs with status and waits until
// the broker has them. Refused (non-nil only when the broker refused some)
// are the entry ids of offs the broker did not take, and why.
func (m *member) settle(ctx context.Context, offs map[int32][]int64, status kgo.AckStatus) (*broker.NotAcked, error) {
	var recs []*kgo.Record
	m.mu.Lock()
	for p, os := range offs {
		for _, o := range os {
			if r := m.held[p][o]; r != nil {
				recs = append(recs, r)
				delete(m.held[p], o)
			}
		}
	}
	m.mu.Unlock()
	// One settle at a time, and nothing else flushing meanwhile: what the
	// broker then says is of these acknowledgements only.
	m.ackSeq.Lock()
	defer m.ackSeq.Unlock()
	m.takeRefused() // of an earlier flush that gave up waiting
	m.cl.MarkAcks(status, recs...)
	if err := m.cl.FlushAcks(ctx); err != nil {
		return nil, fmt.Errorf("kafka share ack (%s) %s as %s/%s: %w", status, m.t.name, m.key.group, m.key.worker, err)
	}
	refused := m.takeRefused()
	if len(refused) == 0 {
		return nil, nil
	}
	na := &broker.NotAcked{}
	var whys []string
	for p, err := range refused {
		for _, o := range offs[p] {
			na.IDs = append(na.IDs, entryID(p, o))
		}
		whys = append(whys, fmt.Sprintf("partition %d: %v", p, err))
	}
	slices.Sort(na.IDs)
	slices.Sort(whys)
	na.Why = fmt.Sprintf("the %s as %s/%s did not take (%s)", status, m.key.group, m.key.worker, strings.Join(whys, "; "))
	return na, nil
}

var _ broker.Reacher = (*Topic)(nil)

// Reach reads what a share group may still be handed from the broker's
// share-partition state (DescribeShareGroupOffsets, KIP-932 and KIP-1226):
// a record below the share-partition start offset (SPSO) is finished —
// accepted by a worker, by its client on its behalf (franz-go accepts at
// the next poll what the previous one handed out and nobody settled), or
// archived by the broker at its delivery limit — and never delivered to the
// group again. A record at the SPSO is not finished (that is what the SPSO
// is); one past it is not either when the lag says no record past the SPSO
// finished, else the broker does not say which did and it is Undecided.
// A classic group has no such state of the broker's own: ok is false.
func (t *Topic) Reach(ctx context.Context, group string) ([]broker.GroupEntry, bool, error) {
	t.mu.Lock()
	used := slices.Contains(t.groups, group)
	t.mu.Unlock()
	if !t.opt.Share || !used {
		return nil, false, nil // a share group nobody read starts at the earliest record (startAtEarliest)
	}
	offs, err := t.shareOffsets(ctx, group)
	if err != nil {
		return nil, false, err
	}
	_, end, err := t.bounds(ctx, t.name)
	if err != nil {
		return nil, false, err
	}
	recs, err := t.read(ctx, t.name, kgo.ReadUncommitted())
	if err != nil {
		return nil, false, err
	}
	out := make([]broker.GroupEntry, len(recs))
	for i, r := range recs {
		so, ok := offs[r.Partition]
		if !ok {
			so.StartOffset = -1 // the group has no state on the partition
		}
		fate, why := t.fate(group, r.Partition, r.Offset, so, end[r.Partition])
		out[i] = broker.GroupEntry{ID: entryID(r.Partition, r.Offset), EventID: string(r.Key), Fate: fate, Why: why}
	}
	return out, true, nil
}

// fate is what share-partition state so (with the partition's high
// watermark hwm) says of the record at off.
func (t *Topic) fate(group string, p int32, off int64, so kadm.ShareOffset, hwm int64) (broker.Fate, string) {
	g := t.groupID(group)
	switch {
	case so.StartOffset < 0: // no member fetched the partition yet: it starts at the earliest record
		return broker.Deliverable, ""
	case off < so.StartOffset:
		return broker.Finished, fmt.Sprintf("its record %s is below the share-partition start offset %d of group %s (lag %d): the broker holds it accepted or archived (at its delivery limit), never to deliver it again",
			entryID(p, off), so.StartOffset, g, so.Lag)
	case off == so.StartOffset:
		return broker.Deliverable, ""
	case so.Lag < 0:
		return broker.Undecided, fmt.Sprintf("the broker reports no lag for partition %d of group %s (DescribeShareGroupOffsets before v1, KIP-1226): whether record %s past the share-partition start offset %d finished is not known",
			p, g, entryID(p, off), so.StartOffset)
	case hwm-so.StartOffset-so.Lag == 0:
		return broker.Deliverable, ""
	}
	return broker.Undecided, fmt.Sprintf("the broker's lag (%d) says %d of the records past the share-partition start offset %d of group %s finished (accepted, or archived behind one still in flight), not which: record %s may be one",
		so.Lag, hwm-so.StartOffset-so.Lag, so.StartOffset, g, entryID(p, off))
}

// shareOffsets is the share-partition state of group on the topic's
// partitions, by partition.
func (t *Topic) shareOffsets(ctx context.Context, group string) (map[int32]kadm.ShareOffset, error) {
	g := t.groupID(group)
	ds, err := t.adm.DescribeShareGroupOffsets(ctx, g)
	if err == nil {
		err = ds.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka describe share group offsets %s: %w", g, err)
	}
	out := map[int32]kadm.ShareOffset{}
	for p, so := range ds[g].Offsets[t.name] {
		if so.Err != nil {
			return nil, fmt.Errorf("kafka describe share group offsets %s partition %d: %w", g, p, so.Err)
		}
		out[p] = so
	}
	return out, nil
}
