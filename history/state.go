package history

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/state"
)

// SamePayload compares two JSON payloads by value, not by spelling.
func SamePayload(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// LoadStateOf reads the end of a scenario where m says the tables are:
// the producer's outbox and books, each consumer's inbox and projection,
// and what the broker still holds. What the broker cannot tell (see its
// capabilities) is left unknown, never guessed. A team's books (its
// journal, its ledger) are not mapped: unbalanced is not judged there.
func LoadStateOf(ctx context.Context, producer, consumer state.DB, b broker.Broker, consumers, models []string, m state.Map) (State, error) {
	st := State{Outbox: map[string]string{}, Unpublished: map[string]bool{}, Stream: map[string]int{},
		DeadLetters: map[string]bool{}, Consumers: map[string]*Consumer{}, Projections: map[string]map[string]Sum{}, NotJudged: map[string]string{}, Inapplicable: map[string]string{}}
	if err := st.loadProducer(ctx, producer, m); err != nil {
		return st, err
	}
	pending, err := st.loadBroker(ctx, b)
	if err != nil {
		return st, err
	}
	if err := st.loadConsumers(ctx, consumer, consumers, models, pending, m); err != nil {
		return st, err
	}
	st.loadReach(ctx, b, consumers)
	return st, st.loadOrder(ctx, consumer, m)
}

// loadReach reads, for a broker that keeps it (broker.Reacher), which of
// its entries each consumer group may still be handed; where it cannot be
// read, lost and stranded are not judged.
func (st *State) loadReach(ctx context.Context, b broker.Broker, consumers []string) {
	r, ok := b.(broker.Reacher)
	if !ok {
		return
	}
	for _, c := range consumers {
		es, known, err := r.Reach(ctx, c)
		if err != nil {
			// The ack log would judge what the broker decides: say so.
			why := fmt.Sprintf("what the broker will still hand group %s could not be read from it (%v)", c, err)
			st.NotJudged[Lost], st.NotJudged[Stranded] = why, why
			continue
		}
		st.Consumers[c].Reach, st.Consumers[c].HasReach = es, known
	}
}

func (st *State) loadProducer(ctx context.Context, producer state.DB, m state.Map) error {
	outbox, err := state.OutboxOf(ctx, producer, m)
	if err != nil {
		return err
	}
	for _, r := range outbox {
		st.Outbox[r.EventID] = r.Payload
		if !r.Published {
			st.Unpublished[r.EventID] = true
		}
	}
	if m.Team {
		return nil
	}
	st.Books, err = loadBooks(ctx, producer)
	return err
}

// loadBroker reads the stream and the dead letters, and returns the pending
// counts per consumer id (nil when the broker cannot count them).
func (st *State) loadBroker(ctx context.Context, b broker.Broker) (map[string]int64, error) {
	caps := b.Capabilities()
	if caps.Has(broker.EntryLog) {
		ids, err := b.Events(ctx)
		if err != nil {
			return nil, fmt.Errorf("list the stream: %w", err)
		}
		for _, id := range ids {
			st.Stream[id]++
		}
		st.HasStream = true
	}
	if k, ok := b.(broker.LiveKeeper); ok {
		st.LiveKeeps = k.LiveWorkerKeeps()
	}
	dls, err := b.DeadLetters(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the dead letters: %w", err)
	}
	for _, dl := range dls {
		st.DeadLetters[dl.EventID] = true
	}
	if !caps.Has(broker.PendingCount) {
		return nil, nil
	}
	pending, err := b.Pending(ctx)
	if err != nil {
		return nil, fmt.Errorf("count pending entries: %w", err)
	}
	return pending, nil
}

func (st *State) loadConsumers(ctx context.Context, db state.DB, consumers, models []string, pending map[string]int64, m state.Map) error {
	inboxes, err := state.InboxesOf(ctx, db, m)
	if err != nil {
		return err
	}
	var rows []state.InboxRow
	if m.Team {
		if rows, err = state.InboxRowsOf(ctx, db, m); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if !slices.Contains(consumers, r.Consumer) && !slices.Contains(st.Strangers, r.Consumer) {
			st.Strangers = append(st.Strangers, r.Consumer)
		}
	}
	slices.Sort(st.Strangers)
	for _, c := range consumers {
		cs, err := loadConsumer(ctx, db, c, inboxes[c], m)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if r.Consumer == c {
				cs.Rows = append(cs.Rows, r)
			}
		}
		cs.Pending, cs.HasPending = pending[c], pending != nil
		st.Consumers[c] = cs
	}
	projections, err := state.ProjectionsOf(ctx, db, m)
	if err != nil {
		return err
	}
	for _, m := range models {
		st.Projections[m] = map[string]Sum{}
		for cur, p := range projections[m] {
			if p.Events != 0 { // a row at zero is the same as none
				st.Projections[m][cur] = p
			}
		}
	}
	return nil
}

func sums(ctx context.Context, db state.DB, query, arg string) (map[string]Sum, error) {
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

// loadConsumer completes consumer c's inbox with its sums per currency.
func loadConsumer(ctx context.Context, db state.DB, c string, inbox map[string]string, m state.Map) (*Consumer, error) {
	if inbox == nil {
		inbox = map[string]string{}
	}
	query := `SELECT payload->>'currency', sum((payload->>'amount')::bigint), count(*) FROM inbox WHERE consumer_id = $1 GROUP BY 1`
	if m.Team {
		query = m.InboxSums()
	}
	sums, err := sums(ctx, db, query, c)
	if err != nil {
		return nil, fmt.Errorf("sum the inbox of %s: %w", c, err)
	}
	return &Consumer{Inbox: inbox, InboxSums: sums}, nil
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

func loadBooks(ctx context.Context, db state.DB) (*Books, error) {
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
