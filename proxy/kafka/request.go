package kafka

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// API keys the proxy reads.
const (
	keyProduce                = 0
	keyFetch                  = 1
	keyMetadata               = 3
	keyOffsetCommit           = 8
	keyFindCoordinator        = 10
	keyJoinGroup              = 11
	keyHeartbeat              = 12
	keyLeaveGroup             = 13
	keySyncGroup              = 14
	keyApiVersions            = 18
	keyAddOffsetsToTxn        = 25
	keyEndTxn                 = 26
	keyTxnOffsetCommit        = 28
	keyDescribeQuorum         = 55
	keyDescribeCluster        = 60
	keyConsumerGroupHeartbeat = 68
	keyShareGroupHeartbeat    = 76
	keyShareFetch             = 78
	keyShareAcknowledge       = 79
)

// request is what the proxy reads of a client's request: the header, and
// for the APIs the history and the triggers read, the names and offsets
// the body carries. The body is read by hand, never decoded by kmsg: kmsg
// sizes a slice by the count a peer sends (bounded only by the bytes left
// times its element's size, some 30 times the message), and a client must
// not make the proxy allocate more than it sent.
type request struct {
	header
	txnID, group string
	acks         int16 // Produce: 0 gets no response
	commit       bool  // EndTxn
	isolation    int8  // Fetch: 1 is read_committed
	topics       []topic
	entries      int
	// session and rebalance are the timeouts a JoinGroup announced, in
	// milliseconds (rebalance 0 before v1, which has none).
	session, rebalance int32
	// unread says why the body was not read: "" when it was, or its API
	// is none the proxy reads.
	unread string
	// over says why the proxy refuses the request unread: it names more
	// entries than MaxEntries, or an API or version kmsg does not know.
	over string
}

type topic struct {
	name  string // resolved from id by the proxy when the request names topics by id
	id    [16]byte
	parts []part
}

type part struct {
	partition int32
	records   []byte // Produce: the record batches
	// Produce: the records decoded from them (numbered as their batches
	// number them), once parsed; bad says what could not be read.
	recs   []Record
	parsed bool
	bad    string
	offset int64      // Fetch: the fetch offset; OffsetCommit, TxnOffsetCommit: the committed offset
	acks   []ackBatch // ShareFetch, ShareAcknowledge
}

// ackBatch is a share group's acknowledgement of a range of offsets: one
// type for the range, or one per offset. 0 gap, 1 accept, 2 release, 3
// reject.
type ackBatch struct {
	first, last int64
	types       []int8
}

// parseRequest reads a request's header and, for the APIs the proxy
// reads, its body.
func parseRequest(msg []byte) (*request, error) {
	h, err := parseHeader(msg)
	if err != nil {
		return nil, err
	}
	q := &request{header: h, acks: -1}
	if q.over = unknownAPI(h.key, h.version); q.over != "" {
		return q, nil // never read, never forwarded: the broker may not know it either
	}
	r := &reader{b: h.body}
	f, v := h.flexible, h.version
	switch h.key {
	case keyProduce:
		q.produce(r, f, v)
	case keyFetch:
		q.fetch(r, f, v)
	case keyOffsetCommit:
		q.offsetCommit(r, f, v)
	case keyTxnOffsetCommit:
		q.txnOffsetCommit(r, f, v)
	case keyEndTxn:
		q.txnID = r.str(f)
		r.i64()
		r.i16()
		q.commit = r.i8() != 0
	case keyAddOffsetsToTxn:
		q.txnID = r.str(f)
		r.i64()
		r.i16()
		q.group = r.str(f)
	case keyJoinGroup:
		q.joinGroup(r, f, v)
	case keyHeartbeat, keyLeaveGroup, keySyncGroup, keyConsumerGroupHeartbeat, keyShareGroupHeartbeat:
		q.group = r.str(f)
	case keyShareFetch, keyShareAcknowledge:
		q.share(r, v)
	}
	switch {
	case q.entries > MaxEntries:
		q.over = fmt.Sprintf("this %s names over %d topics, partitions and acknowledgement batches, the proxy's cap for one request", name(h.key), MaxEntries)
	case r.bad:
		q.unread = fmt.Sprintf("the proxy could not read this %s v%d", name(h.key), v)
	}
	return q, nil
}

// unknownAPI says why the proxy refuses an API key or version kmsg does
// not know ("" if it knows it): it could not read the response, and a
// broker may not survive the request (kfake dereferenced nil on key 999).
func unknownAPI(key, version int16) string {
	req := kmsg.RequestForKey(key)
	switch {
	case req == nil:
		return fmt.Sprintf("an unknown API key %d", key)
	case version < 0 || version > req.MaxVersion():
		return fmt.Sprintf("%s v%d, a version the proxy does not know (it knows v0 to v%d)", name(key), version, req.MaxVersion())
	}
	return ""
}

// topics reads a request's topics array: each by name, or by id from
// version byID, then its partitions.
func (q *request) readTopics(r *reader, flexible, byID bool, each func(*part)) {
	r.array(flexible, func() {
		if q.entries++; q.entries > MaxEntries { // a topic costs its struct even with no partition
			r.bad = true
			return
		}
		var t topic
		if byID {
			t.id = r.uuid()
		} else {
			t.name = r.str(flexible)
		}
		r.array(flexible, func() {
			if q.entries++; q.entries > MaxEntries {
				r.bad = true
				return
			}
			p := part{partition: r.i32()}
			each(&p)
			r.tags(flexible)
			t.parts = append(t.parts, p)
		})
		r.tags(flexible)
		q.topics = append(q.topics, t)
	})
}

// joinGroup reads a JoinGroup's group and the timeouts it announces:
// session_timeout_ms, and from v1 rebalance_timeout_ms
// (https://kafka.apache.org/protocol#The_Messages_JoinGroup).
func (q *request) joinGroup(r *reader, f bool, v int16) {
	q.group = r.str(f)
	q.session = r.i32()
	if v >= 1 {
		q.rebalance = r.i32()
	}
}

func (q *request) produce(r *reader, f bool, v int16) {
	if v >= 3 {
		q.txnID = r.str(f)
	}
	q.acks = r.i16()
	r.i32() // timeout
	q.readTopics(r, f, v >= 13, func(p *part) { p.records = r.bytes(f) })
}

func (q *request) fetch(r *reader, f bool, v int16) {
	if v <= 14 {
		r.i32() // replica id
	}
	r.i32() // max wait
	r.i32() // min bytes
	if v >= 3 {
		r.i32() // max bytes
	}
	if v >= 4 {
		q.isolation = r.i8()
	}
	if v >= 7 {
		r.i32() // session id
		r.i32() // session epoch
	}
	q.readTopics(r, f, v >= 13, func(p *part) {
		if v >= 9 {
			r.i32() // current leader epoch
		}
		p.offset = r.i64()
		if v >= 12 {
			r.i32() // last fetched epoch
		}
		if v >= 5 {
			r.i64() // log start offset
		}
		r.i32() // partition max bytes
	})
}

func (q *request) offsetCommit(r *reader, f bool, v int16) {
	q.group = r.str(f)
	if v >= 1 {
		r.i32()  // generation
		r.str(f) // member id
	}
	if v >= 7 {
		r.str(f) // instance id
	}
	if v >= 2 && v <= 4 {
		r.i64() // retention
	}
	q.readTopics(r, f, v >= 10, func(p *part) {
		p.offset = r.i64()
		if v == 1 {
			r.i64() // timestamp
		}
		if v >= 6 {
			r.i32() // leader epoch
		}
		r.str(f) // metadata
	})
}

func (q *request) txnOffsetCommit(r *reader, f bool, v int16) {
	q.txnID, q.group = r.str(f), r.str(f)
	r.i64() // producer id
	r.i16() // producer epoch
	if v >= 3 {
		r.i32()  // generation
		r.str(f) // member id
		r.str(f) // instance id
	}
	q.readTopics(r, f, v >= 6, func(p *part) {
		p.offset = r.i64()
		if v >= 2 {
			r.i32() // leader epoch
		}
		r.str(f) // metadata
	})
}

// share reads a ShareFetch or ShareAcknowledge request (KIP-932; always
// flexible, topics by id).
func (q *request) share(r *reader, v int16) {
	q.group = r.str(true)
	r.str(true) // member id
	r.i32()     // share session epoch
	if q.key == keyShareFetch {
		r.i32() // max wait
		r.i32() // min bytes
		r.i32() // max bytes
		if v >= 1 {
			r.i32() // max records
			r.i32() // batch size
		}
		if v >= 2 {
			r.i8() // acquire mode
		}
	}
	if v >= 2 {
		r.i8() // is renew ack
	}
	q.readTopics(r, true, true, func(p *part) {
		if q.key == keyShareFetch && v == 0 {
			r.i32() // partition max bytes
		}
		r.array(true, func() {
			if q.entries++; q.entries > MaxEntries {
				r.bad = true
				return
			}
			b := ackBatch{first: r.i64(), last: r.i64()}
			r.array(true, func() { b.types = append(b.types, r.i8()) })
			r.tags(true)
			p.acks = append(p.acks, b)
		})
	})
}

// topicNames is the topics a request names (resolved ids included).
func (q *request) topicNames() []string {
	out := make([]string, 0, len(q.topics))
	for _, t := range q.topics {
		out = append(out, t.name)
	}
	return out
}

// accepts reports whether a share request acknowledges any record as
// processed (type 1, accept).
func (q *request) accepts() bool {
	for _, t := range q.topics {
		for _, p := range t.parts {
			for _, b := range p.acks {
				for _, ty := range b.types {
					if ty == 1 {
						return true
					}
				}
			}
		}
	}
	return false
}
