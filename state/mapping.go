package state

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

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
	// AmountPath and CurrencyPath lead to the amount and the currency in an
	// event's JSON payload, one key (or array index) per element; nil means
	// the reference payload's top-level amount and currency. EventIDPath
	// likewise leads to the event id (nil: event_id).
	AmountPath, CurrencyPath, EventIDPath []string
	// AggregatePath and VersionPath lead to the aggregate key and its
	// version in a payload (event.aggregate, event.version); nil: not
	// mapped, and per-aggregate order is not judged.
	AggregatePath, VersionPath []string
	// AppliedOrder is an inbox column whose order is the consumer's apply
	// order (inbox.applied_order: a serial, an identity or a timestamp);
	// "": not mapped, the apply order cannot be read.
	AppliedOrder string
	// Team: the tables are a team's (a system file), not the reference's.
	Team bool
}

// The reference payload's fields, where a Map names no path.
var (
	defaultAmount   = []string{"amount"}
	defaultCurrency = []string{"currency"}
	defaultEventID  = []string{"event_id"}
)

func orDefault(path, def []string) []string {
	if len(path) == 0 {
		return def
	}
	return path
}

// jsonPath is a path as a SQL text[] literal for #>>: '{data,amountMinor}'.
// Each element is double-quoted inside the array and the literal's quotes
// doubled, so no element can end the literal.
func jsonPath(path []string) string {
	elems := make([]string, len(path))
	for i, e := range path {
		elems[i] = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(e) + `"`
	}
	return "'{" + strings.ReplaceAll(strings.Join(elems, ","), "'", "''") + "}'"
}

// AmountOf reads the amount and the currency out of an event's JSON
// payload where m says they are (by default the reference payload's
// amount and currency), as InboxSums does in SQL. The amount is a JSON
// integer or a string holding one; the currency a string or a number. ok
// is false when either is missing or of another kind.
func (m Map) AmountOf(payload string) (amount int64, currency string, ok bool) {
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return 0, "", false
	}
	a, aok := scalarAt(doc, orDefault(m.AmountPath, defaultAmount))
	c, cok := scalarAt(doc, orDefault(m.CurrencyPath, defaultCurrency))
	if !aok || !cok {
		return 0, "", false
	}
	amount, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return amount, c, true
}

// EventIDOf reads the event id out of an event's JSON payload where m says
// it is (by default the reference payload's event_id); ok is false when the
// payload carries none.
func (m Map) EventIDOf(payload string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return "", false
	}
	return scalarAt(doc, orDefault(m.EventIDPath, defaultEventID))
}

// OrderOf reads the aggregate key and the version out of an event's JSON
// payload where AggregatePath and VersionPath say; ok is false when either
// is not mapped or the payload carries no aggregate (an event outside any
// aggregate), or no whole-number version. An event that carries an
// aggregate but no such version gives its aggregate with ok false: its
// aggregate cannot be ordered, which the verdicts must say rather than
// drop the event.
func (m Map) OrderOf(payload string) (aggregate string, version int64, ok bool) {
	if len(m.AggregatePath) == 0 || len(m.VersionPath) == 0 || !mayHave(payload, m.AggregatePath) {
		return "", 0, false
	}
	dec := json.NewDecoder(strings.NewReader(payload))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return "", 0, false
	}
	a, aok := scalarAt(doc, m.AggregatePath)
	if !aok || a == "" {
		return "", 0, false
	}
	v, vok := scalarAt(doc, m.VersionPath)
	version, err := strconv.ParseInt(v, 10, 64)
	if !vok || err != nil {
		return a, 0, false
	}
	return a, version, true
}

// mayHave is false when payload cannot hold path: its last key (not an
// array index) is nowhere in it, as a JSON string. Most events belong to
// no aggregate: this spares decoding each of them (payloads are read from
// jsonb, which never escapes a plain key).
func mayHave(payload string, path []string) bool {
	last := path[len(path)-1]
	if _, err := strconv.Atoi(last); err == nil {
		return true
	}
	key, _ := json.Marshal(last)
	return strings.Contains(payload, string(key))
}

// scalarAt is the string or number at path in a decoded JSON document, as
// text (what #>> gives for them).
func scalarAt(doc any, path []string) (string, bool) {
	for _, k := range path {
		switch v := doc.(type) {
		case map[string]any:
			var ok bool
			if doc, ok = v[k]; !ok {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(v) {
				return "", false
			}
			doc = v[i]
		default:
			return "", false
		}
	}
	switch v := doc.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	}
	return "", false
}

// Reference is the reference pipeline's schema (sql/).
var Reference = Map{
	OutboxTable: "outbox", OutboxEventID: "event_id", OutboxPayload: "payload", Unpublished: "NOT published",
	InboxTable: "inbox", InboxConsumer: "consumer_id", InboxEventID: "event_id", InboxPayload: "payload",
	Projection: "SELECT consumer_id, currency, amount, events FROM projection",
	// applied_seq, a bigserial, numbers the inbox rows as they are
	// inserted: received_at (now(), the transaction's start) would tie the
	// rows of one transaction and order overlapping transactions by when
	// they began, not by when each row was applied.
	AggregatePath: []string{"aggregate"}, VersionPath: []string{"version"}, AppliedOrder: "applied_seq",
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
	return fmt.Sprintf("SELECT count(*) FROM %s WHERE %s\n", ident(m.OutboxTable), m.Unpublished)
}

// UnpublishedEvent counts the outbox rows of one event ($1, as text) not
// yet published: 0 once the relay has published it.
func (m Map) UnpublishedEvent() string {
	return fmt.Sprintf("SELECT count(*) FROM %s WHERE %s::text = $1 AND (%s\n)", ident(m.OutboxTable), ident(m.OutboxEventID), m.Unpublished)
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
	return fmt.Sprintf("SELECT %s::text, %s::jsonb::text, NOT (%s\n), 0::bigint FROM %s ORDER BY 1",
		ident(m.OutboxEventID), ident(m.OutboxPayload), m.Unpublished, ident(m.OutboxTable))
}

// inboxRows selects consumer, event id (the payload's, so that an inbox
// keyed by entry id still names events) and payload.
func (m Map) inboxRows() string {
	if !m.Team {
		return `SELECT consumer_id, coalesce(payload->>'event_id', event_id), payload::text FROM inbox`
	}
	p := ident(m.InboxPayload)
	return fmt.Sprintf("SELECT %s::text, coalesce((%s::jsonb) #>> %s, %s::text), %s::jsonb::text FROM %s",
		ident(m.InboxConsumer), p, jsonPath(orDefault(m.EventIDPath, defaultEventID)), ident(m.InboxEventID), p, ident(m.InboxTable))
}

// InboxSums sums one consumer's ($1) inbox per currency from its payloads,
// the amount and the currency where AmountPath and CurrencyPath say.
func (m Map) InboxSums() string {
	// A row without a currency or an integer amount (another event type, a
	// forged copy of another shape) sums as currency "" and amount 0: it
	// shows as a mismatch instead of failing the read.
	p := ident(m.InboxPayload) + "::jsonb"
	return fmt.Sprintf(`SELECT coalesce(cur, ''), sum(CASE WHEN amt ~ '^-?[0-9]{1,18}$' THEN amt::bigint ELSE 0 END), count(*)
FROM (SELECT %s #>> %s AS cur, %s #>> %s AS amt FROM %s WHERE %s::text = $1) t GROUP BY 1`,
		p, jsonPath(orDefault(m.CurrencyPath, defaultCurrency)), p, jsonPath(orDefault(m.AmountPath, defaultAmount)), ident(m.InboxTable), ident(m.InboxConsumer))
}

// appliedRows selects consumer, key, payload and the row's rank in its
// consumer's apply order (dense_rank over AppliedOrder: rows that tie share
// a rank), in apply order. The key is the event id column as stored (a
// team's), or the payload's event id (the reference's, as inboxRows).
func (m Map) appliedRows() string {
	key := "coalesce(payload->>'event_id', event_id)"
	if m.Team {
		key = ident(m.InboxEventID) + "::text"
	}
	return fmt.Sprintf(`SELECT c, k, p, dense_rank() OVER (PARTITION BY c ORDER BY o) r FROM
(SELECT %s::text c, %s k, %s::jsonb::text p, %s o FROM %s) t ORDER BY c, r, k`,
		ident(m.InboxConsumer), key, ident(m.InboxPayload), ident(m.AppliedOrder), ident(m.InboxTable))
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
	// The condition is the team's SQL: a newline after it ends a -- comment.
	row := fmt.Sprintf("%s::text || ':' || (%s\n)::text", ident(m.OutboxEventID), m.Unpublished)
	return fmt.Sprintf("SELECT count(*), count(*) FILTER (WHERE %s\n), coalesce(md5(string_agg(%s, ',' ORDER BY %s)), '') FROM %s",
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
	return fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '') FROM (%s\n) t", m.Projection)
}
