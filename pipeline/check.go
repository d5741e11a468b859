package pipeline

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"outboxdrill/broker"
)

// Violation is one way a history breaks the pipeline's guarantees.
type Violation struct {
	Invariant string
	Detail    string
}

func (v Violation) String() string { return v.Invariant + ": " + v.Detail }

// History is what CheckHistory judged, for the verdict line.
type History struct {
	Committed     int // transfers in the journal
	StreamEntries int // entries the broker holds (duplicates included)
	Applied       int // inbox rows of the consumer
	Pending       int64
}

// CheckHistory judges the final state of a drained pipeline as a whole, for
// one consumer id, like a Jepsen queue checker judges a history rather than
// single steps:
//   - no loss: every committed transfer's event reached the broker and the
//     consumer's inbox; nothing rolled back reached either;
//   - exactly-once effect: the projection per currency equals the journal's
//     sums and counts, however often events were delivered;
//   - double entry: every currency's balances sum to zero and each balance is
//     its ledger entries;
//   - nothing stranded: no entry is left pending once the consumer drained.
func CheckHistory(ctx context.Context, producer, consumer *pgxpool.Pool, b broker.Broker, consumerID string) (History, []Violation, error) {
	var h History
	var vs []Violation
	add := func(inv, format string, args ...any) {
		vs = append(vs, Violation{inv, fmt.Sprintf(format, args...)})
	}
	journal, err := eventSet(ctx, producer, `SELECT event_id FROM journal`)
	if err != nil {
		return h, nil, err
	}
	unpublished, err := eventSet(ctx, producer, `SELECT event_id FROM outbox WHERE NOT published`)
	if err != nil {
		return h, nil, err
	}
	inbox, err := eventSet(ctx, consumer, `SELECT event_id FROM inbox WHERE consumer_id = $1`, consumerID)
	if err != nil {
		return h, nil, err
	}
	streamIDs, err := b.Events(ctx)
	if err != nil {
		return h, nil, err
	}
	inStream := map[string]bool{}
	for _, id := range streamIDs {
		inStream[id] = true
	}
	h.Committed, h.StreamEntries, h.Applied = len(journal), len(streamIDs), len(inbox)

	for _, id := range sorted(journal) {
		switch {
		case unpublished[id]:
			add("no loss", "event %s is still unpublished in the outbox", id)
		case !inStream[id]:
			add("no loss", "event %s was committed and marked published but is not in the stream", id)
		case !inbox[id]:
			add("no loss", "event %s is in the stream but not in the inbox of %s", id, consumerID)
		}
	}
	for _, id := range sorted(inbox) {
		if !journal[id] {
			add("no phantom", "event %s is in the inbox but no transfer committed it", id)
		}
	}
	for id := range inStream {
		if !journal[id] {
			add("no phantom", "event %s is in the stream but no transfer committed it", id)
		}
	}
	if err := checkSums(ctx, producer, consumer, consumerID, add); err != nil {
		return h, nil, err
	}
	pending, err := b.Pending(ctx)
	if err != nil {
		return h, nil, err
	}
	if h.Pending = pending[consumerID]; h.Pending != 0 {
		add("nothing stranded", "%d entries still pending for %s after draining", h.Pending, consumerID)
	}
	return h, vs, nil
}

// checkSums compares the projection with the journal, and balances with the
// ledger, per currency.
func checkSums(ctx context.Context, producer, consumer *pgxpool.Pool, consumerID string, add func(inv, format string, args ...any)) error {
	want, err := sums(ctx, producer, `SELECT currency, sum(amount), count(*) FROM journal GROUP BY currency`)
	if err != nil {
		return err
	}
	got, err := sums(ctx, consumer, `SELECT currency, amount, events FROM projection WHERE consumer_id = $1`, consumerID)
	if err != nil {
		return err
	}
	for cur, w := range want {
		if g := got[cur]; g != w {
			add("exactly-once effect", "%s: journal has %d over %d transfers, projection has %d over %d events", cur, w[0], w[1], g[0], g[1])
		}
	}
	for cur, g := range got {
		if _, ok := want[cur]; !ok {
			add("exactly-once effect", "%s: projection has %d over %d events, journal none", cur, g[0], g[1])
		}
	}
	var unbalanced, drift int64
	err = producer.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM (SELECT currency FROM accounts GROUP BY currency HAVING sum(balance) <> 0) s),
  (SELECT count(*) FROM accounts a WHERE a.balance <> (SELECT coalesce(sum(CASE direction WHEN 'credit' THEN amount ELSE -amount END), 0)
     FROM ledger_entries e WHERE e.account = a.account AND e.currency = a.currency))`).Scan(&unbalanced, &drift)
	if err != nil {
		return err
	}
	if unbalanced > 0 || drift > 0 {
		add("double entry", "%d currencies whose balances do not sum to zero, %d accounts that differ from their ledger", unbalanced, drift)
	}
	return nil
}

func eventSet(ctx context.Context, db *pgxpool.Pool, query string, args ...any) (map[string]bool, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set, err
}

func sums(ctx context.Context, db *pgxpool.Pool, query string, args ...any) (map[string][2]int64, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var cur string
		var v [2]int64
		if err := rows.Scan(&cur, &v[0], &v[1]); err != nil {
			return nil, err
		}
		out[cur] = v
	}
	return out, rows.Err()
}

func sorted(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
