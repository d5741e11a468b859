package history

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"outboxdrill/broker"
)

// SamePayload compares two JSON payloads by value, not by spelling.
func SamePayload(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// LoadState reads the end of a scenario: the producer's outbox, each
// consumer's inbox and projection, and what the broker still holds. What the
// broker cannot tell (see its capabilities) is left unknown, never guessed.
func LoadState(ctx context.Context, producer, consumer *pgxpool.Pool, b broker.Broker, consumers, models []string) (State, error) {
	st := State{Outbox: map[string]string{}, Unpublished: map[string]bool{}, Stream: map[string]int{},
		DeadLetters: map[string]bool{}, Consumers: map[string]*Consumer{}, Projections: map[string]map[string]Sum{}}
	rows, err := producer.Query(ctx, `SELECT event_id, payload::text, published FROM outbox`)
	if err != nil {
		return st, fmt.Errorf("read the outbox: %w", err)
	}
	var ev, payload string
	var published bool
	_, err = pgx.ForEachRow(rows, []any{&ev, &payload, &published}, func() error {
		st.Outbox[ev] = payload
		if !published {
			st.Unpublished[ev] = true
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("read the outbox: %w", err)
	}
	if st.Books, err = loadBooks(ctx, producer); err != nil {
		return st, err
	}
	caps := b.Capabilities()
	if caps.Has(broker.EntryLog) {
		ids, err := b.Events(ctx)
		if err != nil {
			return st, fmt.Errorf("list the stream: %w", err)
		}
		for _, id := range ids {
			st.Stream[id]++
		}
		st.HasStream = true
	}
	dls, err := b.DeadLetters(ctx)
	if err != nil {
		return st, fmt.Errorf("list the dead letters: %w", err)
	}
	for _, dl := range dls {
		st.DeadLetters[dl.EventID] = true
	}
	var pending map[string]int64
	if caps.Has(broker.PendingCount) {
		if pending, err = b.Pending(ctx); err != nil {
			return st, fmt.Errorf("count pending entries: %w", err)
		}
	}
	for _, c := range consumers {
		cs, err := loadConsumer(ctx, consumer, c)
		if err != nil {
			return st, err
		}
		cs.Pending, cs.HasPending = pending[c], pending != nil
		st.Consumers[c] = cs
	}
	for _, m := range models {
		p, err := sums(ctx, consumer, `SELECT currency, amount, events FROM projection WHERE consumer_id = $1 AND events <> 0`, m)
		if err != nil {
			return st, fmt.Errorf("read the projection %s: %w", m, err)
		}
		st.Projections[m] = p
	}
	return st, nil
}

func sums(ctx context.Context, db *pgxpool.Pool, query, arg string) (map[string]Sum, error) {
	out := map[string]Sum{}
	rows, err := db.Query(ctx, query, arg)
	if err != nil {
		return nil, err
	}
	var cur string
	var s Sum
	_, err = pgx.ForEachRow(rows, []any{&cur, &s.Amount, &s.Events}, func() error { out[cur] = s; return nil })
	return out, err
}

func loadConsumer(ctx context.Context, db *pgxpool.Pool, c string) (*Consumer, error) {
	cs := &Consumer{Inbox: map[string]string{}}
	rows, err := db.Query(ctx, `SELECT coalesce(payload->>'event_id', event_id), payload::text FROM inbox WHERE consumer_id = $1`, c)
	if err != nil {
		return nil, fmt.Errorf("read the inbox of %s: %w", c, err)
	}
	var ev, payload string
	if _, err = pgx.ForEachRow(rows, []any{&ev, &payload}, func() error { cs.Inbox[ev] = payload; return nil }); err != nil {
		return nil, fmt.Errorf("read the inbox of %s: %w", c, err)
	}
	cs.InboxSums, err = sums(ctx, db, `SELECT payload->>'currency', sum((payload->>'amount')::bigint), count(*) FROM inbox WHERE consumer_id = $1 GROUP BY 1`, c)
	if err != nil {
		return nil, fmt.Errorf("sum the inbox of %s: %w", c, err)
	}
	return cs, nil
}

// The double-entry checks: currencies whose balances do not cancel out, and
// accounts whose balance is not what their ledger entries add up to.
const (
	sqlUnbalanced = `SELECT currency FROM accounts GROUP BY currency HAVING sum(balance) <> 0 ORDER BY 1`
	sqlDrift      = `SELECT a.account || '/' || a.currency FROM accounts a
WHERE a.balance <> (SELECT coalesce(sum(CASE e.direction WHEN 'credit' THEN e.amount ELSE -e.amount END), 0)
    FROM ledger_entries e WHERE e.account = a.account AND e.currency = a.currency)
ORDER BY 1`
)

func loadBooks(ctx context.Context, db *pgxpool.Pool) (*Books, error) {
	bk := &Books{Journal: map[string]bool{}}
	rows, err := db.Query(ctx, `SELECT event_id FROM journal`)
	if err != nil {
		return nil, fmt.Errorf("read the journal: %w", err)
	}
	var ev string
	if _, err := pgx.ForEachRow(rows, []any{&ev}, func() error { bk.Journal[ev] = true; return nil }); err != nil {
		return nil, fmt.Errorf("read the journal: %w", err)
	}
	for _, q := range []struct {
		sql  string
		into *[]string
	}{{sqlUnbalanced, &bk.Unbalanced}, {sqlDrift, &bk.Drift}} {
		rows, err := db.Query(ctx, q.sql)
		if err != nil {
			return nil, fmt.Errorf("check the balances: %w", err)
		}
		if *q.into, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, fmt.Errorf("check the balances: %w", err)
		}
	}
	return bk, nil
}
