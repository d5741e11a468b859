package kafka

import (
	"context"

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
// still in the client's buffer.

// strayHook sees what the member's client buffers.
type strayHook struct{ m *member }

var _ kgo.HookFetchRecordBuffered = strayHook{}

// OnFetchRecordBuffered runs before a fetch's records become takeable by
// a poll: a poll under way (polling) takes them; none under way, they are
// strays.
func (h strayHook) OnFetchRecordBuffered(r *kgo.Record) {
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
	// Not from the hook itself: it runs on the client's fetch goroutine.
	go m.releaseStray(r)
}

// releaseStray gives r back to the broker for any member.
func (m *member) releaseStray(r *kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), settle)
	defer cancel()
	m.cl.MarkAcks(kgo.AckRelease, r)
	_ = m.cl.FlushAcks(ctx) // a client closed meanwhile released it anyway
}

// dropStrays removes from fs the strays it holds (each is dropped once:
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
