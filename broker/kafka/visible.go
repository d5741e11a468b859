package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What a Kafka topic holds is not what its consumers can get once
// transactional producers write to it (KIP-98): every transaction ends in a
// control record (a commit or abort marker) that takes an offset of its own,
// the records of an aborted transaction keep theirs, and the records from
// the first one of a transaction still open on are held back from
// read_committed consumers at the last stable offset
// (https://kafka.apache.org/documentation/#consumerconfigs_isolation.level).
// End offset minus start offset counts all of these, so one committed event
// was two entries and a group that had read it kept a lag of 1 for ever.
//
// committedLog reads what a read_committed consumer can get instead, from
// the broker's own answer: Fetch at isolation level read_committed, whose
// response bounds the data at the partition's last stable offset and lists
// the aborted transactions, which franz-go's own fetch processing
// (kgo.ProcessFetchPartition, the consumer's code) applies, dropping control
// batches and aborted records. kfake does the same as Kafka here: EndTxn
// writes a control batch into the partition, aborted transactions go to an
// index a read_committed Fetch returns, and the last stable offset is the
// first offset of the oldest open transaction (kfake's writeTxnMarker and
// recalculateLSO).

// fetchMaxBytes bounds one Fetch response; a partition with more is read in
// several.
const fetchMaxBytes = 32 << 20

// committedLog lists the records of topic n a read_committed consumer can
// fetch now, partition by partition, each in offset order.
func (t *Topic) committedLog(ctx context.Context, n string) ([]*kgo.Record, error) {
	start, err := t.adm.ListStartOffsets(ctx, n)
	if err == nil {
		err = start.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka list offsets %s: %w", n, err)
	}
	md, err := t.adm.Metadata(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("kafka metadata %s: %w", n, err)
	}
	td, ok := md.Topics[n]
	if !ok {
		return nil, fmt.Errorf("kafka metadata %s: the broker did not list the topic", n)
	}
	if td.Err != nil {
		return nil, fmt.Errorf("kafka metadata %s: %w", n, td.Err)
	}
	var out []*kgo.Record
	ps := make([]int32, 0, len(td.Partitions))
	for p := range td.Partitions {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		from := int64(0)
		if o, ok := start.Lookup(n, p); ok {
			from = o.Offset
		}
		recs, err := t.fetchCommitted(ctx, td, p, from)
		if err != nil {
			return out, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// fetchCommitted reads partition p of td from offset from up to its last
// stable offset at read_committed, as many fetches as that takes.
func (t *Topic) fetchCommitted(ctx context.Context, td kadm.TopicDetail, p int32, from int64) ([]*kgo.Record, error) {
	leader := td.Partitions[p].Leader
	var out []*kgo.Record
	for {
		rp, err := t.fetchOnce(ctx, td, p, leader, from)
		if err != nil {
			return out, err
		}
		if errors.Is(kerr.ErrorForCode(rp.ErrorCode), kerr.OffsetOutOfRange) && rp.LogStartOffset > from {
			from = rp.LogStartOffset // trimmed since the start offset was listed
			continue
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: from, IsolationLevel: kgo.ReadCommitted(), Topic: td.Topic, Partition: p,
		}, &rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			return out, fmt.Errorf("kafka fetch %s/%d at %d: %w", td.Topic, p, from, fp.Err)
		}
		for _, r := range fp.Records {
			if r.Offset < rp.LastStableOffset { // Kafka bounds the answer there already
				out = append(out, r)
			}
		}
		if next >= rp.LastStableOffset {
			return out, nil
		}
		if next <= from {
			return out, fmt.Errorf("kafka fetch %s/%d at %d: no progress below the last stable offset %d", td.Topic, p, from, rp.LastStableOffset)
		}
		from = next
	}
}

// fetchOnce sends one read_committed Fetch for partition p to its leader,
// not waiting for data: what the partition holds now is the answer. The
// topic goes by name and id, which Fetch takes from version 13 on.
func (t *Topic) fetchOnce(ctx context.Context, td kadm.TopicDetail, p, leader int32, from int64) (kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = -1, 0, 0, fetchMaxBytes
	req.IsolationLevel = 1 // read_committed
	req.SessionEpoch = -1  // a full fetch, outside any fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = td.Topic, td.ID
	rpart := kmsg.NewFetchRequestTopicPartition()
	rpart.Partition, rpart.FetchOffset, rpart.PartitionMaxBytes = p, from, fetchMaxBytes
	rt.Partitions = append(rt.Partitions, rpart)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.prod.Broker(int(leader)))
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("kafka fetch %s/%d at %d: %w", td.Topic, p, from, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition != p {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil && !errors.Is(err, kerr.OffsetOutOfRange) {
				return rp, fmt.Errorf("kafka fetch %s/%d at %d: %w", td.Topic, p, from, err)
			}
			return rp, nil
		}
	}
	return kmsg.FetchResponseTopicPartition{}, fmt.Errorf("kafka fetch %s/%d at %d: the broker answered without the partition", td.Topic, p, from)
}
