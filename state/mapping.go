package state

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Map says where the outbox, the inbox and the projection live: the
// reference pipeline's own tables, or a team's, as its system file maps
// them. Table and column names are checked identifiers (the system file
// loader refuses anything else) and are quoted here all the same.
type Map struct {
	OutboxTable, OutboxEventID, OutboxPayload string
	// Unpublished is a SQL condition true for outbox rows the relay has yet
	// to publish.
	Unpublished                                           string
	InboxTable, InboxConsumer, InboxEventID, InboxPayload string
	// Projection is a query returning consumer, currency, amount, events.
	Projection string
	// Team: the tables are a team's (a system file), not the reference's.
	Team bool
}

// Reference is the reference pipeline's schema (sql/).
var Reference = Map{
	OutboxTable: "outbox", OutboxEventID: "event_id", OutboxPayload: "payload", Unpublished: "NOT published",
	InboxTable: "inbox", InboxConsumer: "consumer_id", InboxEventID: "event_id", InboxPayload: "payload",
	Projection: "SELECT consumer_id, currency, amount, events FROM projection",
}

func ident(s string) string { return pgx.Identifier(splitDot(s)).Sanitize() }

func splitDot(s string) []string {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return []string{s[:i], s[i+1:]}
		}
	}
	return []string{s}
}

// CountOutbox counts the outbox rows.
func (m Map) CountOutbox() string { return "SELECT count(*) FROM " + ident(m.OutboxTable) }

// CountUnpublished counts the outbox rows not yet published.
func (m Map) CountUnpublished() string {
	return fmt.Sprintf("SELECT count(*) FROM %s WHERE %s", ident(m.OutboxTable), m.Unpublished)
}

// InboxCounts counts the inbox rows per consumer.
func (m Map) InboxCounts() string {
	return fmt.Sprintf("SELECT %s::text, count(*) FROM %s GROUP BY 1", ident(m.InboxConsumer), ident(m.InboxTable))
}

// outboxRows selects event id, payload (canonical jsonb text), published
// and age in microseconds, in outbox order. A team's table is only known
// by its mapped columns: no age, event id order.
func (m Map) outboxRows() string {
	if !m.Team {
		return `SELECT event_id, payload::text, published, (extract(epoch FROM now() - created_at) * 1e6)::bigint FROM outbox ORDER BY id`
	}
	return fmt.Sprintf("SELECT %s::text, %s::jsonb::text, NOT (%s), 0::bigint FROM %s ORDER BY 1",
		ident(m.OutboxEventID), ident(m.OutboxPayload), m.Unpublished, ident(m.OutboxTable))
}

// inboxRows selects consumer, event id (the payload's, so that an inbox
// keyed by entry id still names events) and payload.
func (m Map) inboxRows() string {
	if !m.Team {
		return `SELECT consumer_id, coalesce(payload->>'event_id', event_id), payload::text FROM inbox`
	}
	p := ident(m.InboxPayload)
	return fmt.Sprintf("SELECT %s::text, coalesce((%s::jsonb)->>'event_id', %s::text), %s::jsonb::text FROM %s",
		ident(m.InboxConsumer), p, ident(m.InboxEventID), p, ident(m.InboxTable))
}

// InboxSums sums one consumer's ($1) inbox per currency from its payloads.
func (m Map) InboxSums() string {
	p := ident(m.InboxPayload) + "::jsonb"
	return fmt.Sprintf("SELECT %s->>'currency', sum((%s->>'amount')::bigint), count(*) FROM %s WHERE %s::text = $1 GROUP BY 1",
		p, p, ident(m.InboxTable), ident(m.InboxConsumer))
}

// rawInboxRows selects consumer, the event id column and the payload of
// every inbox row, as stored, in a stable order.
func (m Map) rawInboxRows() string {
	return fmt.Sprintf("SELECT %s::text, %s::text, %s::jsonb::text FROM %s ORDER BY 1, 2",
		ident(m.InboxConsumer), ident(m.InboxEventID), ident(m.InboxPayload), ident(m.InboxTable))
}

// OutboxFingerprint summarises the outbox in one row (rows, unpublished
// rows, md5 over the mapped columns) so that a change anywhere in it shows:
// what settling watches. Only mapped columns count: a relay that touches a
// bookkeeping column on every poll (attempts, locked_until) is not moving.
func (m Map) OutboxFingerprint() string {
	row := fmt.Sprintf("%s::text || ':' || (%s)::text", ident(m.OutboxEventID), m.Unpublished)
	return fmt.Sprintf("SELECT count(*), count(*) FILTER (WHERE %s), coalesce(md5(string_agg(%s, ',' ORDER BY %s)), '') FROM %s",
		m.Unpublished, row, row, ident(m.OutboxTable))
}

// InboxFingerprint summarises the inbox's mapped columns: see OutboxFingerprint.
func (m Map) InboxFingerprint() string {
	row := fmt.Sprintf("%s::text || ':' || %s::text || ':' || %s::text", ident(m.InboxConsumer), ident(m.InboxEventID), ident(m.InboxPayload))
	return fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(%s, ',' ORDER BY %s)), '') FROM %s", row, row, ident(m.InboxTable))
}

// ProjectionFingerprint summarises the read models the projection query
// returns: see OutboxFingerprint.
func (m Map) ProjectionFingerprint() string {
	return fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM (%s) t", m.Projection)
}
