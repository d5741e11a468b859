package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/proxy/listen"
)

// MaxDecompressed bounds what the proxy builds of one message's record
// batches: their inflated bytes and the records decoded from them, all
// batches together (a request may carry any number of batches: a cap per
// batch let one 957 KB Produce of gzip batches inflate to 1.3 GB). A
// batch is at most the broker's message.max.bytes (1 MB by default)
// compressed; a message that builds past the proxy's message cap is a
// bomb, not a message.
const MaxDecompressed = MaxMessage

// recordCost is what a decoded record costs beyond its bytes (its struct
// and its slot in a slice); headerCost the same for a header.
const recordCost, headerCost = 160, 64

// spend is what reading one message's batches may still build: left
// bytes of the message's cap, each also taken from its connection's tab
// (nil tab: only the message's cap), so that the proxy's account holds
// every byte as it inflates.
type spend struct {
	tab  *listen.Tab
	left int64
}

func newSpend(tab *listen.Tab) *spend {
	return &spend{tab: tab, left: MaxDecompressed}
}

// take takes n bytes for what is being built: errInflated past the
// message's cap, a *listen.OverError past the account's.
func (s *spend) take(n int64) error {
	if n > s.left {
		s.left = 0
		return errInflated
	}
	if err := s.tab.Take(n); err != nil {
		return listen.Named(err, "inflated record batches")
	}
	s.left -= n
	return nil
}

// overCap reports whether an error is a cap reached (the message is
// refused), not a malformed batch (which only leaves the history unread).
func overCap(err error) bool {
	var over *listen.OverError
	return errors.Is(err, errInflated) || errors.As(err, &over)
}

// Record is one record of a batch, as a producer sent it or a consumer got
// it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []RecordHeader
	Timestamp time.Time
	// ProducerID is the batch's (-1: none); Transactional says the batch
	// belongs to a transaction.
	ProducerID    int64
	Transactional bool
}

// RecordHeader is a record's header.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Header is the first value of a record's header ("" for none).
func (r Record) Header(key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// batch is a record batch's header, as the history reads it.
type batch struct {
	baseOffset    int64
	producerID    int64
	transactional bool
	control       bool
	records       []Record
}

var errMagic = errors.New("a record batch of a message format older than v2 (magic 2)")

// parseBatches reads the record batches of one partition (magic 2 only;
// Kafka 4 reads no other). A batch cut short at the end (a fetch's last,
// partial batch) is skipped, as a client skips it.
func parseBatches(b []byte, topic string, partition int32) ([]batch, error) {
	return parseBatchesSpending(b, topic, partition, newSpend(nil))
}

// parseBatchesSpending is parseBatches taking what it builds from s.
func parseBatchesSpending(b []byte, topic string, partition int32, s *spend) ([]batch, error) {
	var out []batch
	for len(b) >= 17 {
		size := int64(int32(binary.BigEndian.Uint32(b[8:12])))
		if size < 0 {
			return out, errors.New("a record batch of negative length")
		}
		if int64(len(b)) < 12+size {
			break // partial
		}
		if b[16] != 2 {
			return out, errMagic
		}
		var kb kmsg.RecordBatch
		if err := kb.ReadFrom(b[:12+size]); err != nil {
			return out, err
		}
		bt, err := readBatch(&kb, topic, partition, s)
		if err != nil {
			return out, err
		}
		out = append(out, bt)
		b = b[12+size:]
	}
	return out, nil
}

// readBatch decompresses a batch and reads its records. Each record's
// bytes are copied out of the batch: a kept record must not pin the whole
// message (or inflated buffer) it came in, which the history's bound does
// not count.
func readBatch(kb *kmsg.RecordBatch, topic string, partition int32, s *spend) (batch, error) {
	bt := batch{baseOffset: kb.FirstOffset, producerID: kb.ProducerID,
		transactional: kb.Attributes&0x10 != 0, control: kb.Attributes&0x20 != 0}
	raw, err := decompress(kb.Records, int8(kb.Attributes&0x07), s)
	if err != nil {
		return bt, err
	}
	for i := int32(0); i < kb.NumRecords && len(raw) > 0; i++ {
		length, n := binary.Varint(raw)
		if n <= 0 || length < 0 || int64(len(raw)-n) < length {
			return bt, errors.New("a malformed record")
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(raw[:n+int(length)]); err != nil {
			return bt, err
		}
		raw = raw[n+int(length):]
		rec, err := copyRecord(&kr, kb, topic, partition, s)
		if err != nil {
			return bt, err
		}
		rec.Transactional = bt.transactional
		bt.records = append(bt.records, rec)
	}
	return bt, nil
}

// copyRecord is a decoded record in memory of its own, taken from s.
func copyRecord(kr *kmsg.Record, kb *kmsg.RecordBatch, topic string, partition int32, s *spend) (Record, error) {
	size := len(kr.Key) + len(kr.Value)
	for _, h := range kr.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if err := s.take(int64(recordCost + headerCost*len(kr.Headers) + size)); err != nil {
		return Record{}, err
	}
	buf := make([]byte, 0, size)
	keep := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		buf = append(buf, b...)
		return buf[len(buf)-len(b) : len(buf) : len(buf)]
	}
	rec := Record{Topic: topic, Partition: partition, Offset: kb.FirstOffset + int64(kr.OffsetDelta), Key: keep(kr.Key), Value: keep(kr.Value),
		Timestamp: time.UnixMilli(kb.FirstTimestamp + kr.TimestampDelta64), ProducerID: kb.ProducerID}
	for _, h := range kr.Headers {
		rec.Headers = append(rec.Headers, RecordHeader{Key: h.Key, Value: keep(h.Value)})
	}
	return rec, nil
}

// decompress inflates a batch's records by its codec (0 none, 1 gzip, 2
// snappy, 3 lz4, 4 zstd), taking every byte it inflates from s.
func decompress(src []byte, codec int8, s *spend) ([]byte, error) {
	switch codec {
	case 0:
		return src, nil
	case 1:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return readBounded(zr, s)
	case 2:
		return unsnappy(src, s)
	case 3:
		return readBounded(lz4.NewReader(bytes.NewReader(src)), s)
	case 4:
		zr, err := zstd.NewReader(bytes.NewReader(src), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(uint64(min(s.left, MaxDecompressed))+1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		return readBounded(zr, s)
	}
	return nil, fmt.Errorf("a record batch of unknown compression codec %d", codec)
}

var errInflated = fmt.Errorf("record batches that decompress past the proxy's cap of %d bytes for one message", MaxDecompressed)

// readBounded reads r whole, taking each growth of its buffer from s
// before it is made (so the account holds the buffer, slack included).
// Growth doubles up to growStep, then goes by growStep: a bomb stops at
// the cap having cost at most the cap.
func readBounded(r io.Reader, s *spend) ([]byte, error) {
	const growStep = 8 << 20
	var out []byte
	for {
		if len(out) == cap(out) {
			grow := int(min(int64(max(cap(out), 32<<10)), growStep, s.left))
			if grow == 0 {
				var probe [1]byte // at the cap: one more byte is over it
				if n, _ := io.ReadFull(r, probe[:]); n > 0 {
					return nil, errInflated
				}
				return out, nil
			}
			if err := s.take(int64(grow)); err != nil {
				return nil, err
			}
			out = slices.Grow(out, grow)
		}
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// xerial is the framing Java's snappy stream writes: a header, then blocks
// each with a big-endian length.
var xerial = []byte{130, 83, 78, 65, 80, 80, 89, 0}

// unsnappy decodes a raw snappy block or xerial-framed blocks, checking
// each block's claimed length before it is allocated.
func unsnappy(src []byte, s *spend) ([]byte, error) {
	if len(src) <= 16 || !bytes.HasPrefix(src, xerial) {
		return unsnappyBlock(nil, src, s)
	}
	var out []byte
	for rem := src[16:]; len(rem) > 0; {
		if len(rem) < 4 {
			return nil, errors.New("malformed xerial framing")
		}
		size := int(int32(binary.BigEndian.Uint32(rem)))
		if size < 0 || len(rem)-4 < size {
			return nil, errors.New("malformed xerial framing")
		}
		var err error
		if out, err = unsnappyBlock(out, rem[4:4+size], s); err != nil {
			return nil, err
		}
		rem = rem[4+size:]
	}
	return out, nil
}

func unsnappyBlock(dst, block []byte, s *spend) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	// The block and the copy appended to dst are both built here.
	if err := s.take(2 * int64(n)); err != nil {
		return nil, err
	}
	b, err := s2.Decode(nil, block)
	return append(dst, b...), err
}
