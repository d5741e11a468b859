// Package state reads the final state of a scenario's databases: the reads
// that both the history checker (history.LoadStateOf) and the scenarios'
// state checks and metrics (steps) need, written once so that the two never
// disagree about what a table holds.
package state

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DB is a pool or a connection.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Sum is one projection row, or an inbox's sum for one currency.
type Sum struct {
	Amount int64 `yaml:"amount" json:"amount"`
	Events int64 `yaml:"events" json:"events"`
}

// OutboxRow is one committed event in the producer's outbox.
type OutboxRow struct {
	EventID   string
	Payload   string // as PostgreSQL renders the jsonb
	Published bool
	// Age is now() minus created_at, both on the producer PostgreSQL's
	// clock: the start of the transaction that produced the row.
	Age time.Duration
}

// Outbox reads every outbox row, in outbox order.
func Outbox(ctx context.Context, db DB) ([]OutboxRow, error) { return OutboxOf(ctx, db, Reference) }

// OutboxOf reads every outbox row where m says the outbox is.
func OutboxOf(ctx context.Context, db DB, m Map) ([]OutboxRow, error) {
	rows, err := db.Query(ctx, m.outboxRows())
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	var out []OutboxRow
	var r OutboxRow
	var us int64
	_, err = pgx.ForEachRow(rows, []any{&r.EventID, &r.Payload, &r.Published, &us}, func() error {
		r.Age = time.Duration(us) * time.Microsecond
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the outbox: %w", err)
	}
	return out, nil
}

// Inboxes reads every consumer's inbox: consumer id → business event id →
// payload. The event id is the payload's, so that an inbox keyed by broker
// entry id (the dedupe_by_entry anti-pattern) still names events.
func Inboxes(ctx context.Context, db DB) (map[string]map[string]string, error) {
	return InboxesOf(ctx, db, Reference)
}

// InboxesOf reads every consumer's inbox where m says it is.
func InboxesOf(ctx context.Context, db DB, m Map) (map[string]map[string]string, error) {
	rows, err := db.Query(ctx, m.inboxRows())
	if err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	out := map[string]map[string]string{}
	var c, ev, payload string
	_, err = pgx.ForEachRow(rows, []any{&c, &ev, &payload}, func() error { put(out, c, ev, payload); return nil })
	if err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	return out, nil
}

// Projections reads every read model: name → currency → row.
func Projections(ctx context.Context, db DB) (map[string]map[string]Sum, error) {
	return ProjectionsOf(ctx, db, Reference)
}

// ProjectionsOf reads the read models where m says they are.
func ProjectionsOf(ctx context.Context, db DB, m Map) (map[string]map[string]Sum, error) {
	rows, err := db.Query(ctx, m.Projection)
	if err != nil {
		return nil, fmt.Errorf("read the projection: %w", err)
	}
	out := map[string]map[string]Sum{}
	var name, cur string
	var s Sum
	// A read model kept per account has several rows per currency: they add up.
	_, err = pgx.ForEachRow(rows, []any{&name, &cur, &s.Amount, &s.Events}, func() error {
		prev := out[name][cur]
		put(out, name, cur, Sum{Amount: prev.Amount + s.Amount, Events: prev.Events + s.Events})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the projection: %w", err)
	}
	return out, nil
}

// put sets m[a][b], making the inner map on first use.
func put[V any](m map[string]map[string]V, a, b string, v V) {
	if m[a] == nil {
		m[a] = map[string]V{}
	}
	m[a][b] = v
}

// InboxRow is one inbox row as stored: Key is the inbox's event id column
// as text, whatever the consumer put there (a business event id, or a
// broker entry id when it dedupes on the wrong identity).
type InboxRow struct {
	Consumer, Key, Payload string
}

// InboxRowsOf reads every inbox row where m says the inbox is, as stored:
// unlike InboxesOf, nothing is merged or renamed, so two rows for one event
// stay two.
func InboxRowsOf(ctx context.Context, db DB, m Map) ([]InboxRow, error) {
	rows, err := db.Query(ctx, m.rawInboxRows())
	if err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	var out []InboxRow
	var r InboxRow
	_, err = pgx.ForEachRow(rows, []any{&r.Consumer, &r.Key, &r.Payload}, func() error { out = append(out, r); return nil })
	if err != nil {
		return nil, fmt.Errorf("read the inbox: %w", err)
	}
	return out, nil
}

// AppliedRow is one inbox row with its place in its consumer's apply
// order: Rank counts from 1; rows whose applied order column holds the
// same value share a rank (their order cannot be told).
type AppliedRow struct {
	Consumer, Key, Payload string
	Rank                   int64
}

// AppliedRowsOf reads every inbox row in its consumer's apply order, by
// the column m.AppliedOrder names; nil, nil when m names none.
func AppliedRowsOf(ctx context.Context, db DB, m Map) ([]AppliedRow, error) {
	if m.AppliedOrder == "" {
		return nil, nil
	}
	rows, err := db.Query(ctx, m.appliedRows())
	if err != nil {
		return nil, fmt.Errorf("read the inbox in apply order: %w", err)
	}
	var out []AppliedRow
	var r AppliedRow
	_, err = pgx.ForEachRow(rows, []any{&r.Consumer, &r.Key, &r.Payload, &r.Rank}, func() error { out = append(out, r); return nil })
	if err != nil {
		return nil, fmt.Errorf("read the inbox in apply order: %w", err)
	}
	return out, nil
}
