package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MaxDecompressed bounds what one compressed record batch may decompress
// to: a batch is at most the broker's message.max.bytes (1 MB by default)
// compressed, and a batch that inflates past the proxy's message cap is a
// bomb, not a batch.
const MaxDecompressed = MaxMessage

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
		bt, err := readBatch(&kb, topic, partition)
		if err != nil {
			return out, err
		}
		out = append(out, bt)
		b = b[12+size:]
	}
	return out, nil
}

// readBatch decompresses a batch and reads its records.
func readBatch(kb *kmsg.RecordBatch, topic string, partition int32) (batch, error) {
	bt := batch{baseOffset: kb.FirstOffset, producerID: kb.ProducerID,
		transactional: kb.Attributes&0x10 != 0, control: kb.Attributes&0x20 != 0}
	raw, err := decompress(kb.Records, int8(kb.Attributes&0x07))
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
		rec := Record{Topic: topic, Partition: partition, Offset: kb.FirstOffset + int64(kr.OffsetDelta), Key: kr.Key, Value: kr.Value,
			Timestamp: time.UnixMilli(kb.FirstTimestamp + kr.TimestampDelta64), ProducerID: kb.ProducerID, Transactional: bt.transactional}
		for _, h := range kr.Headers {
			rec.Headers = append(rec.Headers, RecordHeader{Key: h.Key, Value: h.Value})
		}
		bt.records = append(bt.records, rec)
	}
	return bt, nil
}

// decompress inflates a batch's records by its codec (0 none, 1 gzip, 2
// snappy, 3 lz4, 4 zstd), never past MaxDecompressed.
func decompress(src []byte, codec int8) ([]byte, error) {
	switch codec {
	case 0:
		return src, nil
	case 1:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return readBounded(zr)
	case 2:
		return unsnappy(src)
	case 3:
		return readBounded(lz4.NewReader(bytes.NewReader(src)))
	case 4:
		zr, err := zstd.NewReader(bytes.NewReader(src), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(MaxDecompressed))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		return readBounded(zr)
	}
	return nil, fmt.Errorf("a record batch of unknown compression codec %d", codec)
}

var errInflated = fmt.Errorf("a record batch that decompresses past the proxy's cap of %d bytes", MaxDecompressed)

func readBounded(r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	n, err := out.ReadFrom(io.LimitReader(r, MaxDecompressed+1))
	if err != nil {
		return nil, err
	}
	if n > MaxDecompressed {
		return nil, errInflated
	}
	return out.Bytes(), nil
}

// xerial is the framing Java's snappy stream writes: a header, then blocks
// each with a big-endian length.
var xerial = []byte{130, 83, 78, 65, 80, 80, 89, 0}

// unsnappy decodes a raw snappy block or xerial-framed blocks, checking
// each block's claimed length before it is allocated.
func unsnappy(src []byte) ([]byte, error) {
	if len(src) <= 16 || !bytes.HasPrefix(src, xerial) {
		return unsnappyBlock(nil, src)
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
		if out, err = unsnappyBlock(out, rem[4:4+size]); err != nil {
			return nil, err
		}
		rem = rem[4+size:]
	}
	return out, nil
}

func unsnappyBlock(dst, block []byte) ([]byte, error) {
	n, err := s2.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if len(dst)+n > MaxDecompressed {
		return nil, errInflated
	}
	b, err := s2.Decode(nil, block)
	return append(dst, b...), err
}
