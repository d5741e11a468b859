package steps

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/pipeline"
)

// teamProduce runs a system file's produce statement in ONE producer
// transaction, its ${…} bound as parameters; fail=divzero runs SELECT 1/0
// after it, inside the same transaction.
func teamProduce(ctx context.Context, env *Env, t pipeline.Transfer, fail string) (pipeline.ProduceResult, error) {
	res := pipeline.ProduceResult{Transfer: t}
	err := pgx.BeginFunc(ctx, env.Producer, func(tx pgx.Tx) error {
		if err := teamInsert(ctx, env, tx, t); err != nil {
			return err
		}
		if fail == string(pipeline.DivZero) {
			_, err := tx.Exec(ctx, "SELECT 1/0")
			return err
		}
		return nil
	})
	switch {
	case err == nil:
		res.Committed = true
	case pipeline.IsDivZero(err):
		res.Failed, res.Reason = true, "ERROR: division by zero (SQLSTATE 22012): transaction rolled back"
	default:
		return res, err
	}
	return res, nil
}

// teamInsert runs the system file's produce statement for t inside tx
// (what produce and produce_overlapping share).
func teamInsert(ctx context.Context, env *Env, tx pgx.Tx, t pipeline.Transfer) error {
	sys := env.System
	payload, err := env.payload(t)
	if err != nil {
		return err
	}
	args := make([]any, len(sys.ProduceArgs))
	for i, name := range sys.ProduceArgs {
		args[i] = produceArg(t, payload, name)
	}
	if _, err := tx.Exec(ctx, sys.Produce, args...); err != nil {
		return fmt.Errorf("%s: the system file's produce: %w", sys.ProducePos, err)
	}
	return nil
}

// payload is the event's JSON: the system file's event.payload template
// rendered with t's values, else the runner's own (Transfer.Payload).
func (e *Env) payload(t pipeline.Transfer) (string, error) {
	if e.System == nil || !e.System.Event.Templated() {
		return t.Payload(), nil
	}
	version := ""
	if t.Version != 0 {
		version = strconv.FormatInt(t.Version, 10)
	}
	return e.System.Payload(map[string]string{"event": t.EventID, "amount": strconv.FormatInt(t.Amount, 10), "currency": t.Currency,
		"from": t.From, "to": t.To, "aggregate": t.Aggregate, "version": version})
}

// produceArg is the value of one ${…} of the produce statement.
func produceArg(t pipeline.Transfer, payload, name string) any {
	switch name {
	case "event":
		return t.EventID
	case "amount":
		return t.Amount
	case "currency":
		return t.Currency
	case "from":
		return t.From
	case "to":
		return t.To
	case "payload":
		return payload
	case "aggregate":
		if t.Aggregate == "" {
			return nil
		}
		return t.Aggregate
	case "version":
		if t.Version == 0 {
			return nil
		}
		return t.Version
	}
	return nil
}
