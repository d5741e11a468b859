package soak

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"sync"
	"time"

	"github.com/outboxdrill/runner/world"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// rawBaseline moves events through the same servers with the bare minimum
// and no runner logic, batched like the soak: per batch, one producer
// transaction per event (journal, ledger entries, balances, outbox), one
// pipelined XADD of the batch, one UPDATE marking it, one XREADGROUP, one
// consumer statement per entry (inbox and projection) and one XACK of the
// batch. No faults, no dedupe decisions, no reclaim: the yardstick the soak's
// throughput is compared with.
func rawBaseline(ctx context.Context, w *world.World, events, workers, batch int) (float64, error) {
	iso, err := w.TakePair(ctx, pipeline.Broker)
	if err != nil {
		return 0, err
	}
	// The soak creates a pair of its own rather than wait for this one's
	// reset (deleting every row of the baseline's events).
	defer w.DiscardPair(ctx, iso)
	if err := w.RedisClient().XGroupCreateMkStream(ctx, iso.Stream, "raw", "0").Err(); err != nil {
		return 0, err
	}
	r := rawRun{prod: iso.Env.Producer, cons: iso.Env.Consumer, rdb: w.RedisClient(), stream: iso.Stream}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for wk := range workers {
		wg.Go(func() {
			for first := wk * batch; first < events; first += workers * batch {
				if err := r.batch(ctx, wk, first, min(first+batch, events)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(events) / time.Since(start).Seconds(), nil
}

type rawRun struct {
	prod, cons *pgxpool.Pool
	rdb        *redis.Client
	stream     string
}

func (r rawRun) batch(ctx context.Context, wk, from, to int) error {
	var ids []string
	for i := from; i < to; i++ {
		id := fmt.Sprintf("raw-%d", i)
		ids = append(ids, id)
		err := pgx.BeginFunc(ctx, r.prod, func(tx pgx.Tx) error {
			b := &pgx.Batch{}
			b.Queue(`WITH j AS (INSERT INTO journal (event_id, from_account, to_account, amount, currency) VALUES ($1, 'a', 'b', 1, 'USD') RETURNING id)
INSERT INTO ledger_entries (journal_id, account, currency, direction, amount) SELECT j.id, v.a, 'USD', v.d, 1 FROM j, (VALUES ('a', 'debit'), ('b', 'credit')) v (a, d)`, id)
			b.Queue(`INSERT INTO accounts VALUES ('a', 'USD', -1), ('b', 'USD', 1) ON CONFLICT (account, currency) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance`)
			b.Queue(`INSERT INTO outbox (event_id, payload) VALUES ($1, jsonb_build_object('event_id', $1::text, 'amount', 1, 'currency', 'USD'))`, id)
			return tx.SendBatch(ctx, b).Close()
		})
		if err != nil {
			return err
		}
	}
	if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.XAdd(ctx, &redis.XAddArgs{Stream: r.stream, Values: []any{"event_id", id, "payload", `{"amount":1,"currency":"USD"}`}})
		}
		return nil
	}); err != nil {
		return err
	}
	if _, err := r.prod.Exec(ctx, `UPDATE outbox SET published = true WHERE event_id = ANY($1)`, ids); err != nil {
		return err
	}
	res, err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "raw", Consumer: fmt.Sprint(wk), Streams: []string{r.stream, ">"}, Count: int64(len(ids)), Block: -1}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	var acks []string
	for _, st := range res {
		for _, m := range st.Messages {
			// The consumer transaction in its cheapest form: one statement.
			_, err := r.cons.Exec(ctx, `WITH ins AS (INSERT INTO inbox (consumer_id, event_id, payload) VALUES ('raw', $1, $2) ON CONFLICT DO NOTHING RETURNING 1)
INSERT INTO projection SELECT 'raw', 'USD', 1, 1 FROM ins ON CONFLICT (consumer_id, currency) DO UPDATE SET amount = projection.amount + 1, events = projection.events + 1`,
				m.Values["event_id"], m.Values["payload"])
			if err != nil {
				return err
			}
			acks = append(acks, m.ID)
		}
	}
	if len(acks) == 0 {
		return nil
	}
	return r.rdb.XAck(ctx, r.stream, "raw", acks...).Err()
}
