package pipeline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/broker"
)

// Relay moves unpublished outbox rows to the broker.
type Relay struct {
	DB     *pgxpool.Pool
	Broker broker.Broker
}

// RelayOptions configures one relay pass.
type RelayOptions struct {
	Limit    int  // rows to relay; <= 0 means all unpublished rows
	SkipMark bool // fault: publish, then "crash" before marking the rows
	// MarkFirst is the anti-pattern of marking rows published before the
	// XADD; SkipPublish is its crash window: marked, never published.
	MarkFirst, SkipPublish bool
}

// Published is one outbox row that reached the broker.
type Published struct {
	EventID string // business event id
	EntryID string // broker entry id of this publish
	Payload string
}

// RelayResult says what one relay pass did.
type RelayResult struct {
	Published []Published
	Marked    int
}

// db is what a relay pass reads and marks through: the pool, or a
// transaction holding row locks.
type db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const (
	sqlUnpublished = `SELECT id, event_id, payload::text FROM outbox WHERE NOT published ORDER BY id LIMIT $1`
	// SKIP LOCKED: rows another relay holds are not ours to publish.
	sqlUnpublishedLocked = sqlUnpublished + ` FOR UPDATE SKIP LOCKED`
	sqlMark              = `UPDATE outbox SET published = true, published_at = now() WHERE id = ANY($1) AND NOT published`
)

// Relay reads unpublished rows in outbox order, publishes them, then marks
// exactly the rows the broker accepted. Publish comes first: a crash in
// between publishes again later (a duplicate entry), never loses the event.
func (r *Relay) Relay(ctx context.Context, opt RelayOptions) (RelayResult, error) {
	ids, msgs, err := readUnpublished(ctx, r.DB, sqlUnpublished, opt.Limit)
	if err != nil {
		return RelayResult{}, err
	}
	if opt.MarkFirst {
		return r.markThenPublish(ctx, ids, msgs, opt.SkipPublish)
	}
	return r.publishAndMark(ctx, r.DB, ids, msgs, opt.SkipMark)
}

// markThenPublish is the anti-pattern: a crash after the mark loses the
// events, since no relay will ever read those rows again.
func (r *Relay) markThenPublish(ctx context.Context, ids []int64, msgs []broker.Message, skipPublish bool) (RelayResult, error) {
	var res RelayResult
	if len(ids) == 0 {
		return res, nil
	}
	tag, err := r.DB.Exec(ctx, sqlMark, ids)
	if err != nil {
		return res, err
	}
	res.Marked = int(tag.RowsAffected())
	if skipPublish {
		return res, nil
	}
	entryIDs, err := r.publish(ctx, msgs)
	for i, e := range entryIDs {
		res.Published = append(res.Published, Published{EventID: msgs[i].EventID, EntryID: e, Payload: msgs[i].Payload})
	}
	return res, err
}

func readUnpublished(ctx context.Context, q db, query string, limit int) ([]int64, []broker.Message, error) {
	var lim *int
	if limit > 0 {
		lim = &limit // LIMIT NULL is no limit
	}
	rows, err := q.Query(ctx, query, lim)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var ids []int64
	var msgs []broker.Message
	for rows.Next() {
		var id int64
		var m broker.Message
		if err := rows.Scan(&id, &m.EventID, &m.Payload); err != nil {
			return nil, nil, err
		}
		ids = append(ids, id)
		msgs = append(msgs, m)
	}
	return ids, msgs, rows.Err()
}

// publishAndMark publishes msgs in one pipelined round trip, then marks the
// rows the broker accepted, unless the skip_mark fault stops it before.
func (r *Relay) publishAndMark(ctx context.Context, q db, ids []int64, msgs []broker.Message, skipMark bool) (RelayResult, error) {
	entryIDs, pubErr := r.publish(ctx, msgs)
	var res RelayResult
	for i, e := range entryIDs {
		res.Published = append(res.Published, Published{EventID: msgs[i].EventID, EntryID: e, Payload: msgs[i].Payload})
	}
	if skipMark || len(entryIDs) == 0 {
		return res, pubErr
	}
	tag, err := q.Exec(ctx, sqlMark, ids[:len(entryIDs)])
	if err != nil {
		return res, err
	}
	res.Marked = int(tag.RowsAffected())
	return res, pubErr
}

// Reconcile republishes, with their original event ids and payloads, the
// published outbox rows whose events a consumer has not applied: what a
// broker that lost entries no longer holds. The inbox absorbs any that were
// in flight after all. With the CDC relay (pending not nil) a row counts as
// published unless its event is still pending in the replication slot.
func (r *Relay) Reconcile(ctx context.Context, consumerDB db, consumer string, pending map[string]bool) (RelayResult, error) {
	q := `SELECT event_id, payload::text FROM outbox WHERE published ORDER BY id`
	if pending != nil {
		q = `SELECT event_id, payload::text FROM outbox ORDER BY id`
	}
	rows, err := r.DB.Query(ctx, q)
	if err != nil {
		return RelayResult{}, err
	}
	var all []broker.Message
	for rows.Next() {
		var m broker.Message
		if err := rows.Scan(&m.EventID, &m.Payload); err != nil {
			rows.Close()
			return RelayResult{}, err
		}
		all = append(all, m)
	}
	if err := rows.Err(); err != nil {
		return RelayResult{}, err
	}
	applied, err := consumerDB.Query(ctx, `SELECT event_id FROM inbox WHERE consumer_id = $1`, consumer)
	if err != nil {
		return RelayResult{}, err
	}
	ids, err := pgx.CollectRows(applied, pgx.RowTo[string])
	if err != nil {
		return RelayResult{}, err
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = true
	}
	var missing []broker.Message
	for _, m := range all {
		if !seen[m.EventID] && !pending[m.EventID] {
			m.Republish = true // deliberate, with its original id
			missing = append(missing, m)
		}
	}
	entryIDs, err := r.publish(ctx, missing)
	var res RelayResult
	for i, e := range entryIDs {
		res.Published = append(res.Published, Published{EventID: missing[i].EventID, EntryID: e, Payload: missing[i].Payload})
	}
	return res, err
}

// publish hands msgs to the broker; an error says which step of the relay
// failed the same way on every broker.
func (r *Relay) publish(ctx context.Context, msgs []broker.Message) ([]string, error) {
	ids, err := r.Broker.Publish(ctx, msgs)
	if err != nil {
		err = fmt.Errorf("%w: %w", broker.ErrPublish, err)
	}
	return ids, err
}
