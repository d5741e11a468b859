// Package redisstream implements broker.Broker on one Redis stream key.
package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
)

// Field names of a stream entry.
const (
	FieldEventID = "event_id"
	FieldPayload = "payload"
)

// readBatch bounds one XREADGROUP when a caller asks for "all new entries".
const readBatch = 100

// Stream is a broker.Broker on one stream key. The client is shared by the
// whole run; a Stream only owns its key.
type Stream struct {
	rdb *redis.Client
	key string
	// evField and payField name the entry fields holding the event id and
	// the payload (FieldEventID and FieldPayload unless WithFields).
	evField, payField string

	mu     sync.Mutex
	groups map[string]bool // groups known to exist
}

var _ broker.Broker = (*Stream)(nil)

// New returns the stream stored under key.
func New(rdb *redis.Client, key string) *Stream {
	return &Stream{rdb: rdb, key: key, evField: FieldEventID, payField: FieldPayload, groups: map[string]bool{}}
}

// WithFields makes the stream's entries carry the event id and the payload
// in fields named ev and pay: a team's own entry layout (a system file's
// stream mapping), for what the runner publishes and reads.
func (s *Stream) WithFields(ev, pay string) *Stream {
	s.evField, s.payField = ev, pay
	return s
}

// UseFields is WithFields for the runner (broker.Fielded).
func (s *Stream) UseFields(ev, pay string) { s.WithFields(ev, pay) }

// Placeholders tell a team's services the stream key and, for consumer,
// its group: the consumer id itself.
func (s *Stream) Placeholders(_ context.Context, consumer string) (map[string]string, error) {
	return map[string]string{"stream": s.key, "destination": s.key, "group": consumer}, nil
}

var (
	_ broker.Fielded = (*Stream)(nil)
	_ broker.Named   = (*Stream)(nil)
)

// Capabilities: Redis Streams has all but broker-side dedupe.
func (s *Stream) Capabilities() broker.Capabilities { return capabilities(broker.Scenario{}) }

// capabilities are a stream's, whatever the scenario (Kind.Capabilities):
// it has no options that change them.
func capabilities(broker.Scenario) broker.Capabilities {
	return broker.Capabilities{
		broker.EntryLog: true, broker.ClaimByIdle: true, broker.PendingList: true,
		broker.PendingCount: true, broker.DeliveryCount: true, broker.Retention: true,
		broker.ReplayHistory: true, broker.SideStore: true, broker.Purge: true,
		broker.GroupLag: true,
	}
}

// limits are why Redis Streams lacks what it lacks, in its own documentation.
var limits = map[broker.Capability]string{
	broker.BrokerTxn:    "the runner drives broker transactions only through Kafka's transactional producer; Redis MULTI/EXEC could make an XACK and an XADD atomic, and would cover the consumer's PostgreSQL no more than Kafka's does (https://redis.io/docs/latest/develop/interactions/transactions/)",
	broker.BrokerDedupe: "XADD always appends a new entry; Redis Streams keeps no idempotency key (https://redis.io/docs/latest/commands/xadd/)",
	broker.NativeDeadLetter: "Redis Streams has no dead-letter mechanism: XPENDING's delivery counter is there for the application to move an entry aside itself " +
		"(https://redis.io/docs/latest/develop/data-types/streams/, \"Claiming and the delivery counter\")",
}

// Key is the Redis key of the stream.
func (s *Stream) Key() string { return s.key }

// Publish XADDs msgs in one pipelined round trip.
func (s *Stream) Publish(ctx context.Context, msgs []broker.Message) ([]string, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(msgs))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range msgs {
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{
				Stream: s.key,
				Values: []any{s.evField, m.EventID, s.payField, m.Payload},
			})
		}
		return nil
	})
	ids := make([]string, 0, len(msgs))
	for i, c := range cmds {
		id, err := c.Result()
		if err != nil {
			return ids, fmt.Errorf("XADD %s (event %s): %w", s.key, msgs[i].EventID, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// ensureGroup creates the consumer group on first use, reading from the
// stream's start so that events published before the group existed count.
func (s *Stream) ensureGroup(ctx context.Context, group string) error {
	s.mu.Lock()
	known := s.groups[group]
	s.mu.Unlock()
	if known {
		return nil
	}
	err := s.rdb.XGroupCreateMkStream(ctx, s.key, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("XGROUP CREATE %s %s: %w", s.key, group, err)
	}
	s.mu.Lock()
	s.groups[group] = true
	s.mu.Unlock()
	return nil
}

// Read reads new entries (">"). Only the first read may block: once entries
// are flowing, an empty answer means there are no more.
func (s *Stream) Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]broker.Delivery, error) {
	if err := s.ensureGroup(ctx, group); err != nil {
		return nil, err
	}
	var out []broker.Delivery
	for count <= 0 || len(out) < count {
		n := readBatch
		if count > 0 {
			n = min(n, count-len(out))
		}
		var wait time.Duration
		if len(out) == 0 {
			wait = block
		}
		msgs, err := s.readNew(ctx, group, worker, n, wait)
		if err != nil {
			return out, err
		}
		for _, m := range msgs {
			d := s.delivery(m)
			d.Deliveries = 1
			out = append(out, d)
		}
		if len(msgs) < n {
			break
		}
	}
	return out, nil
}

// blockSlice bounds one blocking XREADGROUP: go-redis cannot interrupt a
// blocked read when a context without deadline is cancelled (Ctrl-C), so a
// long block is served as a series of short real BLOCKs.
const blockSlice = 100 * time.Millisecond

// readNew is one XREADGROUP ">" that waits up to block for a first entry.
func (s *Stream) readNew(ctx context.Context, group, worker string, n int, block time.Duration) ([]redis.XMessage, error) {
	deadline := time.Now().Add(block)
	for {
		// go-redis: Block < 0 sends no BLOCK (answer at once); Block == 0 would
		// be BLOCK 0, wait forever, which a scenario must never do.
		wait := time.Duration(-1)
		if left := time.Until(deadline); left >= time.Millisecond {
			wait = min(left, blockSlice)
		}
		res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: worker, Streams: []string{s.key, ">"},
			Count: int64(n), Block: wait,
		}).Result()
		switch {
		case err == nil && len(res) > 0:
			return res[0].Messages, nil
		case err != nil && !errors.Is(err, redis.Nil):
			return nil, fmt.Errorf("XREADGROUP %s %s: %w", s.key, group, err)
		case wait < 0:
			return nil, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Claim finds pending entries idle for at least minIdle (XPENDING) and takes
// them over (XCLAIM with the same min-idle, so an entry that became active in
// between is not stolen).
func (s *Stream) Claim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	if err := s.ensureGroup(ctx, group); err != nil {
		return nil, err
	}
	limit := int64(count)
	if count <= 0 {
		limit = 10000
	}
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: s.key, Group: group, Idle: minIdle, Start: "-", End: "+", Count: limit,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("XPENDING %s %s: %w", s.key, group, err)
	}
	if len(pend) == 0 {
		return nil, nil
	}
	ids := make([]string, len(pend))
	times := map[string]int{}
	for i, p := range pend {
		ids[i] = p.ID
		times[p.ID] = int(p.RetryCount) + 1 // XCLAIM delivers it once more
	}
	msgs, err := s.rdb.XClaim(ctx, &redis.XClaimArgs{
		Stream: s.key, Group: group, Consumer: worker, MinIdle: minIdle, Messages: ids,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("XCLAIM %s %s: %w", s.key, group, err)
	}
	out := make([]broker.Delivery, 0, len(msgs))
	for _, m := range msgs {
		d := s.delivery(m)
		d.Deliveries = times[m.ID]
		out = append(out, d)
	}
	return out, nil
}

// AutoClaim scans the pending list with XAUTOCLAIM from the start, page by
// page, taking entries idle for at least minIdle.
func (s *Stream) AutoClaim(ctx context.Context, group, worker string, minIdle time.Duration, count int) ([]broker.Delivery, error) {
	if err := s.ensureGroup(ctx, group); err != nil {
		return nil, err
	}
	var out []broker.Delivery
	start := "0-0"
	for count <= 0 || len(out) < count {
		page := int64(readBatch)
		if count > 0 {
			page = int64(min(readBatch, count-len(out)))
		}
		msgs, next, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: s.key, Group: group, Consumer: worker, MinIdle: minIdle, Start: start, Count: page,
		}).Result()
		if err != nil {
			return out, fmt.Errorf("XAUTOCLAIM %s %s: %w", s.key, group, err)
		}
		for _, m := range msgs {
			out = append(out, s.delivery(m))
		}
		if next == "0-0" || next == "" {
			break
		}
		start = next
	}
	return out, s.countDeliveries(ctx, group, worker, out)
}

// countDeliveries fills in how often each entry has been delivered (XAUTOCLAIM
// does not say; XPENDING does, counting this delivery).
func (s *Stream) countDeliveries(ctx context.Context, group, worker string, ds []broker.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: s.key, Group: group, Consumer: worker, Start: "-", End: "+", Count: 10000,
	}).Result()
	if err != nil {
		return fmt.Errorf("XPENDING %s %s: %w", s.key, group, err)
	}
	times := map[string]int{}
	for _, p := range pend {
		times[p.ID] = int(p.RetryCount)
	}
	for i := range ds {
		ds[i].Deliveries = times[ds[i].ID]
	}
	return nil
}

// dlqKey is the dead-letter stream of the stream.
func (s *Stream) dlqKey() string { return s.key + ":dlq" }

// DeadLetter XADDs to the dead-letter stream.
func (s *Stream) DeadLetter(ctx context.Context, dl broker.DeadLetter) error {
	err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.dlqKey(), Values: []any{
		FieldEventID, dl.EventID, FieldPayload, dl.Payload, "reason", dl.Reason,
		"entry_id", dl.EntryID, "deliveries", dl.Deliveries,
	}}).Err()
	if err != nil {
		return fmt.Errorf("XADD %s: %w", s.dlqKey(), err)
	}
	return nil
}

// DeadLetters reads the whole dead-letter stream.
func (s *Stream) DeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, _, err := s.readDLQ(ctx)
	return dls, err
}

// TakeDeadLetters reads the dead-letter stream and deletes what it read.
func (s *Stream) TakeDeadLetters(ctx context.Context) ([]broker.DeadLetter, error) {
	dls, ids, err := s.readDLQ(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if err := s.rdb.XDel(ctx, s.dlqKey(), ids...).Err(); err != nil {
		return nil, fmt.Errorf("XDEL %s: %w", s.dlqKey(), err)
	}
	return dls, nil
}

func (s *Stream) readDLQ(ctx context.Context) ([]broker.DeadLetter, []string, error) {
	msgs, err := s.rdb.XRange(ctx, s.dlqKey(), "-", "+").Result()
	if err != nil {
		return nil, nil, fmt.Errorf("XRANGE %s: %w", s.dlqKey(), err)
	}
	dls := make([]broker.DeadLetter, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		str := func(k string) string { v, _ := m.Values[k].(string); return v }
		n, _ := strconv.Atoi(str("deliveries"))
		dls[i] = broker.DeadLetter{EventID: str(FieldEventID), Payload: str(FieldPayload), Reason: str("reason"), EntryID: str("entry_id"), Deliveries: n}
		ids[i] = m.ID
	}
	return dls, ids, nil
}

func (s *Stream) delivery(m redis.XMessage) broker.Delivery {
	d := broker.Delivery{ID: m.ID}
	d.EventID, _ = m.Values[s.evField].(string)
	d.Payload, _ = m.Values[s.payField].(string)
	return d
}

// Nack leaves ids pending: Redis Streams has no negative acknowledgement.
// The entry stays in the PEL, owned by the worker, until XCLAIM or
// XAUTOCLAIM moves it.
func (s *Stream) Nack(ctx context.Context, group string, ids ...string) error { return ctx.Err() }

// Crash has nothing to drop: a Redis worker keeps no client-side handle. Its
// entries stay in the PEL under its consumer name, as after a real crash.
func (s *Stream) Crash(ctx context.Context, group, worker string) error { return ctx.Err() }

// Ack XACKs ids in group.
func (s *Stream) Ack(ctx context.Context, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := s.rdb.XAck(ctx, s.key, group, ids...).Err(); err != nil {
		return fmt.Errorf("XACK %s %s: %w", s.key, group, err)
	}
	return nil
}

// Entries is XLEN.
func (s *Stream) Entries(ctx context.Context) (int64, error) {
	n, err := s.rdb.XLen(ctx, s.key).Result()
	if err != nil {
		return 0, fmt.Errorf("XLEN %s: %w", s.key, err)
	}
	return n, nil
}

// Events reads the whole stream (XRANGE - +) and returns each entry's event id.
func (s *Stream) Events(ctx context.Context) ([]string, error) {
	msgs, err := s.rdb.XRange(ctx, s.key, "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("XRANGE %s: %w", s.key, err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = s.delivery(m).EventID
	}
	return ids, nil
}

// Pending is XINFO GROUPS: pending count per group. A stream that does not
// exist yet has no groups.
func (s *Stream) Pending(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	n, err := s.rdb.Exists(ctx, s.key).Result()
	if err != nil || n == 0 {
		return out, err
	}
	groups, err := s.rdb.XInfoGroups(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", s.key, err)
	}
	for _, g := range groups {
		out[g.Name] = g.Pending
	}
	return out, nil
}

// PendingStats reads every group's pending list (XPENDING, up to 10,000
// entries a group).
func (s *Stream) PendingStats(ctx context.Context) (broker.PendingStats, error) {
	var st broker.PendingStats
	groups, err := s.Pending(ctx)
	if err != nil {
		return st, err
	}
	for g, n := range groups {
		if n == 0 {
			continue
		}
		pend, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.key, Group: g, Start: "-", End: "+", Count: 10000}).Result()
		if err != nil {
			return st, fmt.Errorf("XPENDING %s %s: %w", s.key, g, err)
		}
		for _, p := range pend {
			st.OldestIdle = max(st.OldestIdle, p.Idle)
			st.Redeliveries += max(0, p.RetryCount-1)
		}
	}
	return st, nil
}

// Trim is XTRIM MAXLEN keep (exact).
func (s *Stream) Trim(ctx context.Context, keep int) (int64, error) {
	n, err := s.rdb.XTrimMaxLen(ctx, s.key, int64(keep)).Result()
	if err != nil {
		return 0, fmt.Errorf("XTRIM %s: %w", s.key, err)
	}
	return n, nil
}

// seenKey holds the keys of the SETNX-dedupe anti-pattern, one hash per stream.
func (s *Stream) seenKey() string { return s.key + ":seen" }

// MarkSeen is HSETNX on the stream's seen hash (pipeline.SeenStore).
func (s *Stream) MarkSeen(ctx context.Context, key string) (bool, error) {
	ok, err := s.rdb.HSetNX(ctx, s.seenKey(), key, 1).Result()
	if err != nil {
		return false, fmt.Errorf("HSETNX %s: %w", s.seenKey(), err)
	}
	return ok, nil
}

// Delete removes the stream key, and with it every group, and the dead
// letters and seen keys.
func (s *Stream) Delete(ctx context.Context) error {
	return s.rdb.Del(ctx, s.key, s.dlqKey(), s.seenKey()).Err()
}
