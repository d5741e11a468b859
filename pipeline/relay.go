package pipeline

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"outboxdrill/broker"
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
}

// Published is one outbox row that reached the broker.
type Published struct {
	EventID string // business event id
	EntryID string // broker entry id of this publish
}

// RelayResult says what one relay pass did.
type RelayResult struct {
	Published []Published
	Marked    int
}

// Relay reads unpublished rows in outbox order, publishes them, then marks
// exactly the rows the broker accepted. Publish comes first: a crash in
// between publishes again later (a duplicate entry), never loses the event.
func (r *Relay) Relay(ctx context.Context, opt RelayOptions) (RelayResult, error) {
	var limit *int
	if opt.Limit > 0 {
		limit = &opt.Limit // LIMIT NULL is no limit
	}
	rows, err := r.DB.Query(ctx,
		`SELECT id, event_id, payload::text FROM outbox WHERE NOT published ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return RelayResult{}, err
	}
	var ids []int64
	var msgs []broker.Message
	for rows.Next() {
		var id int64
		var m broker.Message
		if err := rows.Scan(&id, &m.EventID, &m.Payload); err != nil {
			rows.Close()
			return RelayResult{}, err
		}
		ids = append(ids, id)
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return RelayResult{}, err
	}

	entryIDs, pubErr := r.Broker.Publish(ctx, msgs)
	var res RelayResult
	for i, e := range entryIDs {
		res.Published = append(res.Published, Published{EventID: msgs[i].EventID, EntryID: e})
	}
	if opt.SkipMark || len(entryIDs) == 0 {
		return res, pubErr
	}
	tag, err := r.DB.Exec(ctx,
		`UPDATE outbox SET published = true, published_at = now() WHERE id = ANY($1) AND NOT published`,
		ids[:len(entryIDs)])
	if err != nil {
		return res, err
	}
	res.Marked = int(tag.RowsAffected())
	return res, pubErr
}
