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
	Unpublished                                          string
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
