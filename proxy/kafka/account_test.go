package kafka

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/internal/testutil"
)

// fakeBroker is an upstream that answers nothing and counts what reached
// it: a request the proxy refuses must never get there.
type fakeBroker struct {
	ln net.Listener
	n  atomic.Int64
}

func newFakeBroker(t *testing.T) *fakeBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &fakeBroker{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					b.n.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return b
}

func (b *fakeBroker) received() int64 { return b.n.Load() }

func (b *fakeBroker) proxy(t *testing.T, lim Limits) *Proxy {
	p, err := ListenWith(b.ln.Addr().String(), lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refusedEvent is the Unread of the proxy's first refusal, "" if none.
func refusedEvent(p *Proxy) string {
	for _, e := range p.Events() {
		if strings.HasPrefix(e.Unread, "refused by the proxy") {
			return e.Unread
		}
	}
	return ""
}

// gzipBatch is a record batch, gzip-compressed, of one record whose value
// is size zero bytes: a few KB that inflate to size.
func gzipBatch(size int) []byte {
	r := kmsg.Record{Value: make([]byte, size)}
	body := r.AppendTo(nil)
	r.Length = int32(len(body) - 1)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(r.AppendTo(nil))
	zw.Close()
	b := kmsg.RecordBatch{Magic: 2, Attributes: 1, NumRecords: 1, Records: z.Bytes(), ProducerID: -1}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:12], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// produceOf is a Produce v8 of records to partition 0 of topic t.
func produceOf(acks int16, records []byte) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 8, acks, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "t"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = records
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return frame(keyProduce, 8, 1, req.AppendTo(nil))
}

// H1: one Produce of many gzip batches, each under the cap of the old
// per-batch check, inflates past the request's cap: it is refused with
// MESSAGE_TOO_LARGE, never forwarded, having built at most about the cap
// (it inflated every batch, 320 MB here, when each batch had a cap of
// its own).
func TestInflatedBatchesCountTowardTheRequest(t *testing.T) {
	one := gzipBatch(8 << 20)
	records := bytes.Repeat(one, 40)
	up := newFakeBroker(t)
	p := up.proxy(t, DefaultLimits())
	c := dialProxy(t, p)
	var resp kmsg.ProduceResponse
	n := testutil.Allocated(func() {
		c.Write(produceOf(1, records))
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		var size [4]byte
		if _, err := readFull(c, size[:]); err != nil {
			t.Fatalf("no answer: %v", err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := readFull(c, msg); err != nil {
			t.Fatal(err)
		}
		resp.SetVersion(8)
		if err := resp.ReadFrom(msg[4:]); err != nil {
			t.Fatal(err)
		}
	})
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].ErrorCode != errMessageTooLarge {
		t.Errorf("answer %+v; want MESSAGE_TOO_LARGE on t[0]", resp.Topics)
	}
	if got := up.received(); got != 0 {
		t.Errorf("the broker got %d bytes of a refused Produce", got)
	}
	if n > 160<<20 {
		t.Errorf("the Produce built %d MB; want about the cap (%d MB)", n>>20, MaxDecompressed>>20)
	}
	if ev := refusedEvent(p); !strings.Contains(ev, "decompress past") {
		t.Errorf("the refusal is not named: %q", ev)
	}
	testutil.Within(t, 10*time.Second, "the account back at 0", func() {
		for p.Held() != 0 {
			time.Sleep(time.Millisecond)
		}
	})
}

// With acks=0 the broker's way to refuse is to close the connection.
func TestInflatedBatchesAcksZeroCloses(t *testing.T) {
	up := newFakeBroker(t)
	p := up.proxy(t, DefaultLimits())
	c := dialProxy(t, p)
	c.Write(produceOf(0, bytes.Repeat(gzipBatch(8<<20), 10)))
	if got := testutil.ReadToClose(t, c); got != "" {
		t.Errorf("got %q; want the connection closed", got)
	}
	if got := up.received(); got != 0 {
		t.Errorf("the broker got %d bytes of a refused Produce", got)
	}
}

// H1: small requests count too, and a request's bytes are held until its
// response came: requests of 200 KB that the broker never answers fill a
// connection's account of 512 KB, and the next one closes the connection
// (only messages of 1 MiB or more counted, released at the next one).
func TestSmallRequestsAreHeldUntilAnswered(t *testing.T) {
	up := newFakeBroker(t)
	lim := DefaultLimits()
	lim.ConnBytes, lim.TotalBytes = 512<<10, 1<<20
	p := up.proxy(t, lim)
	c := dialProxy(t, p)
	one := produceOf(1, batchOf("k", strings.Repeat("v", 200<<10)))
	go func() {
		for range 10 {
			if _, err := c.Write(one); err != nil {
				return
			}
		}
	}()
	testutil.ReadToClose(t, c)
	if got := up.received(); got > 3*int64(len(one)) {
		t.Errorf("the broker got %d bytes: %d requests of %d past a connection's 512 KB", got, got/int64(len(one)), len(one))
	}
	testutil.Within(t, 10*time.Second, "the account back at 0 once closed", func() {
		for p.Held() != 0 {
			time.Sleep(time.Millisecond)
		}
	})
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
