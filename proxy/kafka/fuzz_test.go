package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// batchOf is a record batch of records (key, value pairs), uncompressed.
func batchOf(kvs ...string) []byte {
	var recs []byte
	for i := 0; i+1 < len(kvs); i += 2 {
		r := kmsg.Record{OffsetDelta: int32(i / 2), Key: []byte(kvs[i]), Value: []byte(kvs[i+1]),
			Headers: []kmsg.Header{{Key: "event-id", Value: []byte(kvs[i])}}}
		body := r.AppendTo(nil)
		r.Length = int32(len(body) - 1) // one byte of varint length 0 was written
		recs = append(recs, r.AppendTo(nil)...)
	}
	b := kmsg.RecordBatch{Magic: 2, NumRecords: int32(len(kvs) / 2), Records: recs, ProducerID: -1, LastOffsetDelta: int32(len(kvs)/2 - 1)}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:12], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

func kafkaSeeds() [][]byte {
	produce := kmsg.NewPtrProduceRequest()
	produce.Version, produce.Acks = 9, -1
	txn := "tx"
	produce.TransactionID = &txn
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "t"
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = batchOf("e1", "v1", "e2", "v2")
	pt.Partitions = append(pt.Partitions, pp)
	produce.Topics = append(produce.Topics, pt)
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.IsolationLevel = 13, 1
	ft := kmsg.NewFetchRequestTopic()
	ft.TopicID = [16]byte{1}
	ft.Partitions = append(ft.Partitions, kmsg.NewFetchRequestTopicPartition())
	fetch.Topics = append(fetch.Topics, ft)
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group = 8, "g"
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "t"
	ct.Partitions = append(ct.Partitions, kmsg.NewOffsetCommitRequestTopicPartition())
	commit.Topics = append(commit.Topics, ct)
	share := kmsg.NewPtrShareAcknowledgeRequest()
	group := "sg"
	share.GroupID = &group
	st := kmsg.NewShareAcknowledgeRequestTopic()
	sp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	sp.AcknowledgementBatches = append(sp.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{LastOffset: 3, AcknowledgeTypes: []int8{1}})
	st.Partitions = append(st.Partitions, sp)
	share.Topics = append(share.Topics, st)
	end := kmsg.NewPtrEndTxnRequest()
	end.Version, end.TransactionalID, end.Commit = 3, "tx", true
	var out [][]byte
	for _, r := range []kmsg.Request{produce, fetch, commit, share, end} {
		out = append(out, frame(r.Key(), r.GetVersion(), 7, r.AppendTo(nil))[4:])
	}
	return out
}

// FuzzKafkaRequest reads arbitrary client bytes as one request's header
// and body, as a relayed connection does: never a panic, and nothing
// kept beyond the caps.
func FuzzKafkaRequest(f *testing.F) {
	for _, s := range kafkaSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		msg := binary.BigEndian.AppendUint32(nil, uint32(len(in)))
		q, err := parseRequest(append(msg, in...))
		if err != nil {
			return
		}
		if q.entries > MaxEntries+1 {
			t.Fatalf("read %d entries, over the cap", q.entries)
		}
		p := &Proxy{topicIDs: map[[16]byte]string{{1}: "t"}, txns: map[string]*txn{}}
		x := p.resolve(q)
		_ = Trigger{Op: OpAck, Topic: "t", Group: "g"}.matches(x)
		c := &conn{p: p, fetchAt: map[topicPartition]int64{}}
		c.noteFetch(q)
		_ = c.requestEvent(q, "", true)
		if q.unread == "" && errorable[q.key] {
			_ = encodeResponse(q, errorResponse(q))
		}
	})
}

// FuzzKafkaResponse reads arbitrary broker bytes as the response to each
// API the proxy decodes (at a version the input picks), then as the
// history reads it: never a panic. The broker addresses it names are not
// rewritten (the proxy is closed: no listener starts).
func FuzzKafkaResponse(f *testing.F) {
	fetch := kmsg.NewPtrFetchResponse()
	fetch.Version = 12
	ft := kmsg.NewFetchResponseTopic()
	ft.Topic = "t"
	fp := kmsg.NewFetchResponseTopicPartition()
	fp.RecordBatches = batchOf("e1", "v1")
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	f.Add(byte(keyFetch), byte(12), fetch.AppendTo(nil))
	md := kmsg.NewPtrMetadataResponse()
	md.Version = 12
	md.Brokers = append(md.Brokers, kmsg.MetadataResponseBroker{Host: "10.0.0.1", Port: 9092})
	f.Add(byte(keyMetadata), byte(12), md.AppendTo(nil))
	f.Fuzz(func(t *testing.T, key, version byte, body []byte) {
		keys := []int16{}
		for k := range decoded {
			keys = append(keys, k)
		}
		k := int16(key)
		if !decoded[k] {
			k = keys[int(key)%len(keys)]
		}
		resp := kmsg.ResponseForKey(k)
		resp.SetVersion(int16(version) % (resp.MaxVersion() + 1))
		if resp.ReadFrom(body) != nil {
			return
		}
		p := &Proxy{topicIDs: map[[16]byte]string{}, txns: map[string]*txn{}, listeners: nil, closed: true}
		_, _ = p.rewrite(resp)
		q := &request{header: header{key: k, version: resp.GetVersion()}, isolation: 1}
		c := &conn{p: p, fetchAt: map[topicPartition]int64{{"t", 0}: 1}}
		ev := Event{}
		c.readBody(q, resp, &ev)
	})
}

// FuzzKafkaBatches reads arbitrary bytes as a partition's record batches:
// never a panic, never past the decompression cap.
func FuzzKafkaBatches(f *testing.F) {
	f.Add(batchOf("e1", "v1", "e2", "v2"))
	f.Add(append(batchOf("a", "b"), batchOf("c", "d")[:20]...))
	f.Fuzz(func(t *testing.T, in []byte) {
		batches, _ := parseBatches(in, "t", 0)
		for _, b := range batches {
			for _, r := range b.records {
				if len(r.Key)+len(r.Value) > MaxDecompressed {
					t.Fatalf("a record over the cap")
				}
			}
		}
	})
}

func TestBatchesReadBack(t *testing.T) {
	batches, err := parseBatches(append(batchOf("e1", "v1", "e2", "v2"), batchOf("e3", "v3")[:30]...), "t", 0)
	if err != nil || len(batches) != 1 || len(batches[0].records) != 2 || string(batches[0].records[1].Key) != "e2" ||
		batches[0].records[1].Offset != 1 || batches[0].records[1].Header("event-id") != "e2" {
		t.Fatalf("%+v %v; want one batch of e1, e2 (the partial one skipped)", batches, err)
	}
}
