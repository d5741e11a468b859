package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Group is one consumer group of the stream as XINFO GROUPS reports it.
type Group struct {
	Name    string
	Pending int64
	// Undelivered is how many entries the group has not been handed yet:
	// Redis's lag, or, where Redis cannot tell it (-1 after a deletion),
	// whether the last entry is past the group's last-delivered id (0 or 1).
	Undelivered int64
	// LastDelivered is the id of the last entry handed to the group: a
	// later entry is still to come, an earlier one only if pending.
	LastDelivered string
}

// Entry is one entry the stream holds.
type Entry struct{ ID, EventID string }

// PendingEntry is one entry of a group's pending list (XPENDING, extended form).
type PendingEntry struct {
	ID         string
	Consumer   string // the worker that holds it
	Idle       time.Duration
	Deliveries int64
	EventID    string // the entry's event id field; "" when the entry was deleted
}

// Groups reads XINFO GROUPS. A stream that does not exist has none.
func (s *Stream) Groups(ctx context.Context) ([]Group, error) {
	n, err := s.rdb.Exists(ctx, s.key).Result()
	if err != nil || n == 0 {
		return nil, err
	}
	infos, err := s.rdb.XInfoGroups(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", s.key, err)
	}
	var last string
	out := make([]Group, 0, len(infos))
	for _, g := range infos {
		lag := g.Lag
		if lag < 0 {
			if last == "" {
				if last, err = s.lastID(ctx); err != nil {
					return nil, err
				}
			}
			lag = 0
			if last != "" && idLess(g.LastDeliveredID, last) {
				lag = 1
			}
		}
		out = append(out, Group{Name: g.Name, Pending: g.Pending, Undelivered: lag, LastDelivered: g.LastDeliveredID})
	}
	return out, nil
}

// Lag counts, per group, the entries it has not finished with: those not
// handed out yet (XINFO GROUPS lag) and those pending. Where Redis cannot
// tell the lag (nil after a deletion) the entries after the group's
// last-delivered id are counted (XRANGE), not estimated.
func (s *Stream) Lag(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	n, err := s.rdb.Exists(ctx, s.key).Result()
	if err != nil || n == 0 {
		return out, err
	}
	infos, err := s.rdb.XInfoGroups(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", s.key, err)
	}
	for _, g := range infos {
		lag := g.Lag
		if lag < 0 {
			after, err := s.rdb.XRange(ctx, s.key, "("+g.LastDeliveredID, "+").Result()
			if err != nil {
				return nil, fmt.Errorf("XRANGE %s: %w", s.key, err)
			}
			lag = int64(len(after))
		}
		out[g.Name] = lag + g.Pending
	}
	return out, nil
}

func (s *Stream) lastID(ctx context.Context) (string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.key, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("XREVRANGE %s: %w", s.key, err)
	}
	if len(msgs) == 0 {
		return "", nil
	}
	return msgs[0].ID, nil
}

// EntryList lists the entries the stream holds (XRANGE - +), with the
// event id each carries.
func (s *Stream) EntryList(ctx context.Context) ([]Entry, error) {
	msgs, err := s.rdb.XRange(ctx, s.key, "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", s.key, err)
	}
	out := make([]Entry, len(msgs))
	for i, m := range msgs {
		out[i] = Entry{ID: m.ID, EventID: s.delivery(m).EventID}
	}
	return out, nil
}

// PendingEntries lists group's pending entries (up to 10,000) with the
// event id each carries, read from the stream itself in one pipelined
// round trip.
func (s *Stream) PendingEntries(ctx context.Context, group string) ([]PendingEntry, error) {
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.key, Group: group, Start: "-", End: "+", Count: 10000}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s: %w", s.key, group, err)
	}
	if len(pend) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	ranges := make([]*redis.XMessageSliceCmd, len(pend))
	for i, p := range pend {
		ranges[i] = pipe.XRangeN(ctx, s.key, p.ID, p.ID, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", s.key, err)
	}
	out := make([]PendingEntry, len(pend))
	for i, p := range pend {
		out[i] = PendingEntry{ID: p.ID, Consumer: p.Consumer, Idle: p.Idle, Deliveries: p.RetryCount}
		if msgs := ranges[i].Val(); len(msgs) == 1 {
			out[i].EventID = s.delivery(msgs[0]).EventID
		}
	}
	return out, nil
}

// Deliverable lists, per group, the entries the group may still be handed:
// those it holds pending and those past its last-delivered id. A group
// that does not exist is left out: whoever creates it decides.
func (s *Stream) Deliverable(ctx context.Context, entries []Entry) (map[string]map[string]bool, error) {
	groups, err := s.Groups(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{}
	for _, g := range groups {
		set := map[string]bool{}
		for _, e := range entries {
			if idLess(g.LastDelivered, e.ID) {
				set[e.ID] = true
			}
		}
		if g.Pending > 0 {
			pend, err := s.PendingEntries(ctx, g.Name)
			if err != nil {
				return nil, err
			}
			for _, p := range pend {
				set[p.ID] = true
			}
		}
		out[g.Name] = set
	}
	return out, nil
}

// idLess orders stream ids "ms-seq" numerically.
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || am == bm && as < bs
}

func splitID(id string) (uint64, uint64) {
	var ms, seq uint64
	fmt.Sscanf(id, "%d-%d", &ms, &seq)
	return ms, seq
}
