package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A share member's client fetches only while the worker polls (its topic
// is paused in between), but a fetch can still be on its way when a poll
// ends: the poll's wait ran out during the fetch's long poll, or the poll
// drained the client's buffer and the client fetched again before the
// pause. The broker acquires what such a fetch brings for this member and
// counts the delivery; no worker has seen it yet. Such a record, a stray,
// stays in the client's buffer, and the member's next poll hands it out
// as its first delivery — as a real consumer processes what its fetch
// brought, however late. (Released at once, as before, a record published
// just after an empty read came to its worker on its second delivery, and
// max_deliveries set it aside one delivery early.)
//
// But a stray is locked to its member (record.lock.duration.ms, 30 s by
// default), and another member of the group polling meanwhile would get
// nothing (seen ~1 in 25 matrix runs: a claim by worker-2 found bus-1
// locked to worker-1). So before a member polls, the strays the other
// members of its group keep are released (the broker keeps the delivery
// counted, as it counted the acquisition), and their members' next polls
// leave them out, though their clients' buffers still hold them. A stray
// whose lock runs out before its member polls again is the broker's to
// hand out anew, as with any consumer's prefetch: the member's worker may
// then still get the copy its client buffered, on its old count, and its
// ack is refused (NotAcked) — or, if the broker meanwhile handed the
// record to this very member again, taken, and that later copy comes to
// the worker too (the broker checks the member, not the delivery).

// strayHook sees what the member's client buffers.
type strayHook struct{ m *member }

var _ kgo.HookFetchRecordBuffered = (*strayHook)(nil)

// OnFetchRecordBuffered runs before a fetch's records become takeable by
// a poll: a poll under way (polling) takes them; none under way, they are
// strays. A stray is known by its record, not its offset: the broker may
// hand the same offset to the member again (a later delivery), and that
// copy is not the stray.
func (h *strayHook) OnFetchRecordBuffered(r *kgo.Record) {
	m := h.m
	if m.polling.Load() || r.Topic != m.t.name {
		return
	}
	m.strayMu.Lock()
	defer m.strayMu.Unlock()
	if m.strays == nil {
		m.strays = map[*kgo.Record]bool{}
	}
	m.strays[r] = false
}

// releaseOthersStrays gives back, before m polls, the strays the other
// members of its group keep: the broker locked them to members that are
// not polling. It reports whether it gave any back: they are on their way
// to a member of the group, maybe m.
func (m *member) releaseOthersStrays(ctx context.Context) bool {
	t := m.t
	var others []*member
	t.mu.Lock()
	for k, o := range t.members {
		if k.group == m.key.group && o != m {
			others = append(others, o)
		}
	}
	t.mu.Unlock()
	released := false
	for _, o := range others {
		released = o.releaseStrays(ctx) || released
	}
	return released
}

// releaseStrays releases the member's kept strays and waits until the
// broker has the releases. The release is marked while strayMu is held
// (MarkAcks takes only the record's own lock), so a poll of the member
// under way either took the stray first, and it is its worker's, or
// finds it released and leaves it out. What the broker says of the
// releases is discarded: one refused (the lock ran out meanwhile) leaves
// the record with the broker as much as one accepted.
func (m *member) releaseStrays(ctx context.Context) bool {
	var recs []*kgo.Record
	m.strayMu.Lock()
	for r, released := range m.strays {
		if !released {
			m.strays[r] = true
			recs = append(recs, r)
		}
	}
	if len(recs) > 0 {
		m.cl.MarkAcks(kgo.AckRelease, recs...)
	}
	m.strayMu.Unlock()
	if len(recs) == 0 {
		return false
	}
	fctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	m.ackSeq.Lock()
	defer m.ackSeq.Unlock()
	_ = m.cl.FlushAcks(fctx) // a client closed meanwhile released them anyway
	m.takeRefused()
	return true
}

// takeStrays removes from recs the strays released for another member,
// and forgets every stray of recs: the client hands a buffered record out
// once, and those it kept are now handed out.
func (m *member) takeStrays(recs []*kgo.Record) []*kgo.Record {
	m.strayMu.Lock()
	defer m.strayMu.Unlock()
	if len(m.strays) == 0 {
		return recs
	}
	kept := recs[:0:0]
	for _, r := range recs {
		released, stray := m.strays[r]
		delete(m.strays, r)
		if !stray || !released {
			kept = append(kept, r)
		}
	}
	return kept
}
