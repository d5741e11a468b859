package kafka

import (
	"context"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A share member's client fetches only while the worker polls (its topic
// is paused in between), but a fetch can still be on its way when a poll
// ends: the poll's wait ran out during the fetch's long poll, or the poll
// drained the client's buffer and the client fetched again before the
// pause. The broker acquires what such a fetch brings for this member —
// locked to it (record.lock.duration.ms, 30 s by default) though no
// worker ever sees it — and another member polling meanwhile gets nothing
// (seen ~1 in 25 matrix runs: a claim by worker-2 found bus-1 locked to
// worker-1). So what the client buffers while no poll runs, a stray, is
// released at once (the broker counts that delivery, as it counted the
// acquisition) and left out of the member's next poll, which finds it
// still in the client's buffer. A stray is what the client buffers after
// the poll returned; a response buffered in the instant between the poll
// taking the buffer and returning (a round trip shorter than a few
// instructions) would count as the poll's and stay with the worker. What
// a poll of count records leaves in the buffer stays too, as a prefetch
// does with any share consumer: it is the worker's next read.

// strayHook sees what the member's client buffers. It holds the client
// from NewClient on (OnNewClient runs before any client goroutine starts),
// as member.cl is set only after NewClient returns.
type strayHook struct {
	m  *member
	cl atomic.Pointer[kgo.Client]
}

var (
	_ kgo.HookNewClient           = (*strayHook)(nil)
	_ kgo.HookFetchRecordBuffered = (*strayHook)(nil)
)

func (h *strayHook) OnNewClient(cl *kgo.Client) { h.cl.Store(cl) }

// OnFetchRecordBuffered runs before a fetch's records become takeable by
// a poll: a poll under way (polling) takes them; none under way, they are
// strays. The release is marked here, at once (MarkAcks takes only the
// record's own lock): a poll that takes the stray before the release is
// flushed would otherwise accept it as handed out. The flush waits on
// this very fetch goroutine, so it runs apart.
func (h *strayHook) OnFetchRecordBuffered(r *kgo.Record) {
	m := h.m
	if m.polling.Load() || r.Topic != m.t.name {
		return
	}
	m.strayMu.Lock()
	if m.strays == nil {
		m.strays = map[int32]map[int64]bool{}
	}
	if m.strays[r.Partition] == nil {
		m.strays[r.Partition] = map[int64]bool{}
	}
	m.strays[r.Partition][r.Offset] = true
	m.strayMu.Unlock()
	cl := h.cl.Load()
	cl.MarkAcks(kgo.AckRelease, r)
	go m.flushStrays(cl)
}

// flushStrays sends the strays' releases. What the broker says of them
// is discarded: a release refused (the record's lock ran out meanwhile)
// leaves it with the broker as much as one accepted.
func (m *member) flushStrays(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	m.ackSeq.Lock()
	defer m.ackSeq.Unlock()
	_ = cl.FlushAcks(ctx) // a client closed meanwhile released them anyway
	m.takeRefused()
}

// dropStrays removes from recs the strays it holds (each is dropped once:
// the client hands a buffered record out once).
func (m *member) dropStrays(recs []*kgo.Record) []*kgo.Record {
	m.strayMu.Lock()
	defer m.strayMu.Unlock()
	if len(m.strays) == 0 {
		return recs
	}
	kept := recs[:0:0]
	for _, r := range recs {
		if m.strays[r.Partition][r.Offset] {
			delete(m.strays[r.Partition], r.Offset)
			continue
		}
		kept = append(kept, r)
	}
	return kept
}
