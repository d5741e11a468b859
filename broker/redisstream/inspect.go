package redisstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
)

// The stream is a broker.Inspector (settling reads its groups and
// pending entries one by one) and a broker.Lister (lost is judged on the
// entries it holds).
var (
	_ broker.Inspector = (*Stream)(nil)
	_ broker.Lister    = (*Stream)(nil)
)

// Groups reads XINFO GROUPS. A stream that does not exist has none.
func (s *Stream) Groups(ctx context.Context) ([]broker.Group, error) {
	n, err := s.rdb.Exists(ctx, s.key).Result()
	if err != nil || n == 0 {
		return nil, err
	}
	infos, err := s.rdb.XInfoGroups(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", s.key, err)
	}
	var last string
	out := make([]broker.Group, 0, len(infos))
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
		out = append(out, broker.Group{Name: g.Name, Pending: g.Pending, Undelivered: lag, LastDelivered: g.LastDeliveredID})
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
func (s *Stream) EntryList(ctx context.Context) ([]broker.Entry, error) {
	msgs, err := s.rdb.XRange(ctx, s.key, "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", s.key, err)
	}
	out := make([]broker.Entry, len(msgs))
	for i, m := range msgs {
		out[i] = broker.Entry{ID: m.ID, EventID: s.delivery(m).EventID}
	}
	return out, nil
}

// PendingEntries lists group's pending entries (up to 10,000) with the
// event id each carries, read from the stream itself in one pipelined
// round trip.
func (s *Stream) PendingEntries(ctx context.Context, group string) ([]broker.PendingEntry, error) {
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
	out := make([]broker.PendingEntry, len(pend))
	for i, p := range pend {
		out[i] = broker.PendingEntry{ID: p.ID, Consumer: p.Consumer, Idle: p.Idle, Deliveries: p.RetryCount}
		if msgs := ranges[i].Val(); len(msgs) == 1 {
			out[i].EventID = s.delivery(msgs[0]).EventID
		}
	}
	return out, nil
}

// Deliverable lists, per group, the entries the group may still be handed:
// those it holds pending and those past its last-delivered id. A group
// that does not exist is left out: whoever creates it decides.
func (s *Stream) Deliverable(ctx context.Context, entries []broker.Entry) (map[string]map[string]bool, error) {
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
