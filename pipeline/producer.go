package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Producer writes transfers to the producer database.
type Producer struct {
	DB *pgxpool.Pool
}

// ProduceResult says what happened to one transfer.
type ProduceResult struct {
	Committed bool
	Failed    bool   // the injected fault rolled the transaction back
	Reason    string // why it failed
	Transfer  Transfer
}

// The statements of one transfer, in the order they run in its transaction.
const (
	sqlJournal = `WITH j AS (
    INSERT INTO journal (event_id, from_account, to_account, amount, currency)
    VALUES ($1, $2, $3, $4, $5) RETURNING id)
INSERT INTO ledger_entries (journal_id, account, currency, direction, amount)
SELECT j.id, v.account, $5, v.direction, $4
FROM j, (VALUES ($2::text, 'debit'), ($3::text, 'credit')) AS v (account, direction)`
	sqlBalances = `INSERT INTO accounts (account, currency, balance)
VALUES ($1, $3, -$4::bigint), ($2, $3, $4::bigint)
ON CONFLICT (account, currency) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance`
	sqlOutbox      = `INSERT INTO outbox (event_id, payload) VALUES ($1, $2::jsonb)`
	sqlNextVersion = `INSERT INTO aggregates VALUES ($1, 1)
ON CONFLICT (aggregate) DO UPDATE SET version = aggregates.version + 1 RETURNING version`
)

// Produce commits journal, ledger entries, balances and the outbox row in ONE
// transaction. With DivZero the fault runs after the outbox insert, so every
// write of the transfer is rolled back together.
func (p *Producer) Produce(ctx context.Context, t Transfer, fault Fault) (ProduceResult, error) {
	if t.From == t.To {
		return ProduceResult{}, fmt.Errorf("transfer %s: from and to are both %q", t.EventID, t.From)
	}
	err := pgx.BeginFunc(ctx, p.DB, func(tx pgx.Tx) error {
		if t.Aggregate != "" { // the version is part of the payload: it comes first
			if err := tx.QueryRow(ctx, sqlNextVersion, t.Aggregate).Scan(&t.Version); err != nil {
				return err
			}
		}
		b := &pgx.Batch{}
		b.Queue(sqlJournal, t.EventID, t.From, t.To, t.Amount, t.Currency)
		b.Queue(sqlBalances, t.From, t.To, t.Currency, t.Amount)
		b.Queue(sqlOutbox, t.EventID, t.Payload())
		if err := tx.SendBatch(ctx, b).Close(); err != nil || fault != DivZero {
			return err
		}
		// After every write, in the same transaction: it rolls them all
		// back. Not in the batch: pgx drops the prepared statements of a
		// batch that failed, and each produce after a fault would plan its
		// statements anew (half the produces of a soak at faults 0.1).
		_, err := tx.Exec(ctx, sqlDivZero)
		return err
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return ProduceResult{Committed: true, Transfer: t}, nil
	case fault == DivZero && IsDivZero(err):
		return ProduceResult{Failed: true, Reason: "division by zero (SQLSTATE 22012): transaction rolled back", Transfer: t}, nil
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return ProduceResult{}, fmt.Errorf("event %s was already produced (%s)", t.EventID, pgErr.ConstraintName)
	}
	return ProduceResult{}, err
}
