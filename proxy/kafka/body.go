package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka's error codes the proxy reads or answers with.
const (
	errNotLeader               = 6
	errCoordinatorNotAvailable = 15
	errNotEnoughReplicas       = 19
	errDuplicateSequence       = 46
	errFetchSessionNotFound    = 70
	errMessageTooLarge         = 10
	errUnsupportedVersion      = 35
)

// readBody reads what the history keeps of a response into ev, and
// returns the crossing a delivery is counted as.
func (c *conn) readBody(q *request, resp kmsg.Response, ev *Event) crossing {
	x := crossing{key: q.key, fromServer: true, group: q.group, groupKnown: q.key == keyShareFetch}
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		c.readProduce(q, r, ev)
	case *kmsg.FetchResponse:
		ev.ErrorCode = r.ErrorCode
		c.readFetch(r, ev, q.isolation == 1)
	case *kmsg.ShareFetchResponse:
		ev.ErrorCode = r.ErrorCode
		c.readShareFetch(r, ev)
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				setError(ev, c.p.topicName(t.Topic, t.TopicID), p.Partition, p.ErrorCode)
			}
		}
	case *kmsg.TxnOffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				setError(ev, c.p.topicName(t.Topic, t.TopicID), p.Partition, p.ErrorCode)
			}
		}
	case *kmsg.ShareAcknowledgeResponse:
		ev.ErrorCode = r.ErrorCode
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				setError(ev, c.p.topicName("", t.TopicID), p.Partition, p.ErrorCode)
			}
		}
	case *kmsg.EndTxnResponse:
		ev.ErrorCode = r.ErrorCode
	case *kmsg.JoinGroupResponse:
		ev.ErrorCode = r.ErrorCode
	case *kmsg.SyncGroupResponse:
		ev.ErrorCode = r.ErrorCode
	case *kmsg.HeartbeatResponse:
		ev.ErrorCode = r.ErrorCode
	case *kmsg.LeaveGroupResponse:
		ev.ErrorCode = r.ErrorCode
	}
	for _, rec := range ev.Records {
		x.topics = append(x.topics, rec.Topic)
	}
	return x
}

// setError gives a request's partition its response's error code.
func setError(ev *Event, topic string, partition int32, code int16) {
	for i := range ev.Partitions {
		if p := &ev.Partitions[i]; p.Topic == topic && p.Partition == partition {
			p.ErrorCode = code
		}
	}
}

// topicName is a response topic's name, by its id when it has none.
func (p *Proxy) topicName(topic string, id [16]byte) string {
	if topic != "" || id == ([16]byte{}) {
		return topic
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.topicIDs[id]
}

// readProduce numbers a Produce's records by the base offsets the broker
// gave them; a partition the broker refused keeps none.
func (c *conn) readProduce(q *request, r *kmsg.ProduceResponse, ev *Event) {
	base := map[topicPartition]int64{}
	for _, t := range r.Topics {
		topic := c.p.topicName(t.Topic, t.TopicID)
		for _, p := range t.Partitions {
			setError(ev, topic, p.Partition, p.ErrorCode)
			if p.ErrorCode == 0 || p.ErrorCode == errDuplicateSequence { // a duplicate is stored already
				base[topicPartition{topic, p.Partition}] = p.BaseOffset
			}
		}
	}
	for _, t := range q.topics {
		for _, p := range t.parts {
			if b, ok := base[topicPartition{t.name, p.partition}]; ok {
				ev.Records = append(ev.Records, c.produced(ev, t.name, p, b)...)
			}
		}
	}
}

// readFetch reads what a Fetch delivered, partition by partition.
func (c *conn) readFetch(r *kmsg.FetchResponse, ev *Event, committed bool) {
	for _, t := range r.Topics {
		topic := c.p.topicName(t.Topic, t.TopicID)
		for _, p := range t.Partitions {
			setError(ev, topic, p.Partition, p.ErrorCode)
			if p.ErrorCode == 0 {
				c.readFetched(ev, topic, &p, committed)
			}
		}
	}
}

// readFetched reads a Fetch partition's records as the client keeps them:
// none below the offset it fetched from, no control record, and with
// read_committed none of an aborted transaction.
func (c *conn) readFetched(ev *Event, topic string, p *kmsg.FetchResponseTopicPartition, committed bool) {
	batches, err := parseBatchesSpending(p.RecordBatches, topic, p.Partition, c.spent())
	if err != nil && ev.Unread == "" {
		ev.Unread = fmt.Sprintf("%s[%d]: %v", topic, p.Partition, err)
	}
	c.mu.Lock()
	from, known := c.fetchAt[topicPartition{topic, p.Partition}]
	c.mu.Unlock()
	aborted := abortedTxns{pending: p.AbortedTransactions, active: map[int64]bool{}}
	for _, b := range batches {
		skip := committed && aborted.skips(b)
		if b.control || skip {
			continue
		}
		for _, r := range b.records {
			if !known || r.Offset >= from {
				ev.Records = append(ev.Records, r)
			}
		}
	}
}

// abortedTxns follows a partition's aborted transactions through its
// batches as a read_committed client does: a producer's transactional
// batches are aborted from the transaction's first offset until its abort
// marker.
type abortedTxns struct {
	pending []kmsg.FetchResponseTopicPartitionAbortedTransaction
	active  map[int64]bool
}

func (a *abortedTxns) skips(b batch) bool {
	for len(a.pending) > 0 && a.pending[0].FirstOffset <= b.baseOffset {
		a.active[a.pending[0].ProducerID] = true
		a.pending = a.pending[1:]
	}
	if b.control {
		delete(a.active, b.producerID) // the marker ends it (commit or abort)
		return true
	}
	return b.transactional && a.active[b.producerID]
}

// readShareFetch reads the records a ShareFetch acquired for the member,
// with their delivery counts, and the errors of the acknowledgements it
// carried.
func (c *conn) readShareFetch(r *kmsg.ShareFetchResponse, ev *Event) {
	for _, t := range r.Topics {
		topic := c.p.topicName("", t.TopicID)
		for _, p := range t.Partitions {
			setError(ev, topic, p.Partition, p.AcknowledgeErrorCode)
			if p.ErrorCode != 0 {
				continue
			}
			batches, err := parseBatchesSpending(p.Records, topic, p.Partition, c.spent())
			if err != nil && ev.Unread == "" {
				ev.Unread = fmt.Sprintf("%s[%d]: %v", topic, p.Partition, err)
			}
			for _, b := range batches {
				for _, rec := range b.records {
					if n, ok := acquired(p.AcquiredRecords, rec.Offset); ok && !b.control {
						ev.Records = append(ev.Records, rec)
						ev.DeliveryCounts = append(ev.DeliveryCounts, n)
					}
				}
			}
		}
	}
}

// acquired is a record's delivery count, if the member acquired it.
func acquired(ranges []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord, offset int64) (int16, bool) {
	for _, a := range ranges {
		if offset >= a.FirstOffset && offset <= a.LastOffset {
			return a.DeliveryCount, true
		}
	}
	return 0, false
}

// errorResponse is the response a request gets for an error fault: a real,
// retriable error, on every partition it names (or the response's own).
func errorResponse(q *request) kmsg.Response {
	resp := kmsg.ResponseForKey(q.key)
	resp.SetVersion(q.version)
	switch r := resp.(type) {
	case *kmsg.ProduceResponse:
		produceError(q, r)
	case *kmsg.FetchResponse:
		fetchError(q, r)
	case *kmsg.OffsetCommitResponse, *kmsg.TxnOffsetCommitResponse:
		commitError(q, resp)
	case *kmsg.ShareFetchResponse, *kmsg.ShareAcknowledgeResponse:
		shareError(q, resp)
	case *kmsg.EndTxnResponse:
		r.ErrorCode = errCoordinatorNotAvailable
	case *kmsg.JoinGroupResponse:
		r.ErrorCode = errCoordinatorNotAvailable
	case *kmsg.SyncGroupResponse:
		r.ErrorCode = errCoordinatorNotAvailable
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = errCoordinatorNotAvailable
	case *kmsg.LeaveGroupResponse:
		r.ErrorCode = errCoordinatorNotAvailable
	}
	return resp
}

// produceError fails every partition of a Produce with NOT_ENOUGH_REPLICAS:
// the broker wrote nothing.
func produceError(q *request, r *kmsg.ProduceResponse) { produceErrors(q, r, errNotEnoughReplicas) }

// produceErrorCode is a Produce's response failing every partition with
// code.
func produceErrorCode(q *request, code int16) kmsg.Response {
	r := kmsg.NewPtrProduceResponse()
	r.SetVersion(q.version)
	produceErrors(q, r, code)
	return r
}

func produceErrors(q *request, r *kmsg.ProduceResponse, code int16) {
	for _, t := range q.topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.name, t.id
		for _, p := range t.parts {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode, rp.BaseOffset = p.partition, code, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
}

// commitError fails every partition of an OffsetCommit or TxnOffsetCommit
// with COORDINATOR_NOT_AVAILABLE: nothing was committed.
func commitError(q *request, resp kmsg.Response) {
	for _, t := range q.topics {
		switch r := resp.(type) {
		case *kmsg.OffsetCommitResponse:
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.name, t.id
			for _, p := range t.parts {
				rt.Partitions = append(rt.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: p.partition, ErrorCode: errCoordinatorNotAvailable})
			}
			r.Topics = append(r.Topics, rt)
		case *kmsg.TxnOffsetCommitResponse:
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.name, t.id
			for _, p := range t.parts {
				rt.Partitions = append(rt.Partitions, kmsg.TxnOffsetCommitResponseTopicPartition{Partition: p.partition, ErrorCode: errCoordinatorNotAvailable})
			}
			r.Topics = append(r.Topics, rt)
		}
	}
}

// fetchError fails a Fetch: from v7 (fetch sessions) with the response's
// own FETCH_SESSION_ID_NOT_FOUND, which makes the client start its session
// again; before, every partition NOT_LEADER_OR_FOLLOWER.
func fetchError(q *request, r *kmsg.FetchResponse) {
	if q.version >= 7 {
		r.ErrorCode = errFetchSessionNotFound
		return
	}
	for _, t := range q.topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.name
		for _, p := range t.parts {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.partition, errNotLeader
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
}

// shareError fails every partition of a ShareFetch or ShareAcknowledge
// with NOT_LEADER_OR_FOLLOWER (and a ShareFetch's acknowledgements too).
func shareError(q *request, resp kmsg.Response) {
	for _, t := range q.topics {
		switch r := resp.(type) {
		case *kmsg.ShareFetchResponse:
			rt := kmsg.NewShareFetchResponseTopic()
			rt.TopicID = t.id
			for _, p := range t.parts {
				rp := kmsg.NewShareFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.partition, errNotLeader
				if len(p.acks) > 0 {
					rp.AcknowledgeErrorCode = errNotLeader
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		case *kmsg.ShareAcknowledgeResponse:
			rt := kmsg.NewShareAcknowledgeResponseTopic()
			rt.TopicID = t.id
			for _, p := range t.parts {
				rp := kmsg.NewShareAcknowledgeResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.partition, errNotLeader
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	}
}
