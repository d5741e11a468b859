package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// rawBaseline moves events through the same servers with the bare minimum
// and no runner logic: per event the producer transaction (journal, ledger
// entries, balances, outbox), XADD, the outbox mark, XREADGROUP, the consumer
// transaction (inbox, projection) and XACK, in a tight loop on each worker.
// It is the yardstick the soak's throughput is compared with.
func rawBaseline(ctx context.Context, w *World, events, workers int) (float64, error) {
	iso, err := w.acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer w.recycle(ctx, iso, false)
	stream := iso.streamKey
	if err := w.rdb.XGroupCreateMkStream(ctx, stream, "raw", "0").Err(); err != nil {
		return 0, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for wk := range workers {
		wg.Go(func() {
			for i := wk; i < events; i += workers {
				if err := rawEvent(ctx, iso.pools[0], iso.pools[1], w.rdb, stream, wk, i); err != nil {
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

func rawEvent(ctx context.Context, prod, cons *pgxpool.Pool, rdb *redis.Client, stream string, wk, i int) error {
	id := fmt.Sprintf("raw-%d", i)
	payload := fmt.Sprintf(`{"event_id":%q,"from":"a","to":"b","amount":1,"currency":"USD"}`, id)
	tx, err := prod.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `WITH j AS (INSERT INTO journal (event_id, from_account, to_account, amount, currency) VALUES ($1, 'a', 'b', 1, 'USD') RETURNING id)
INSERT INTO ledger_entries (journal_id, account, currency, direction, amount) SELECT j.id, v.a, 'USD', v.d, 1 FROM j, (VALUES ('a', 'debit'), ('b', 'credit')) v (a, d)`, id)
	if err == nil {
		_, err = tx.Exec(ctx, `INSERT INTO accounts VALUES ('a', 'USD', -1), ('b', 'USD', 1) ON CONFLICT (account, currency) DO UPDATE SET balance = accounts.balance + EXCLUDED.balance`)
	}
	if err == nil {
		_, err = tx.Exec(ctx, `INSERT INTO outbox (event_id, payload) VALUES ($1, $2)`, id, payload)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"event_id", id, "payload", payload}}).Err(); err != nil {
		return err
	}
	if _, err := prod.Exec(ctx, `UPDATE outbox SET published = true WHERE event_id = $1`, id); err != nil {
		return err
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "raw", Consumer: fmt.Sprint(wk), Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res) == 0 || len(res[0].Messages) == 0 {
		return err // another worker took the entry: it handles it
	}
	m := res[0].Messages[0]
	ctx2, ev, pl := ctx, m.Values["event_id"], m.Values["payload"]
	tx2, err := cons.Begin(ctx2)
	if err != nil {
		return err
	}
	_, err = tx2.Exec(ctx2, `INSERT INTO inbox (consumer_id, event_id, payload) VALUES ('raw', $1, $2) ON CONFLICT DO NOTHING`, ev, pl)
	if err == nil {
		_, err = tx2.Exec(ctx2, `INSERT INTO projection VALUES ('raw', 'USD', 1, 1) ON CONFLICT (consumer_id, currency) DO UPDATE SET amount = projection.amount + 1, events = projection.events + 1`)
	}
	if err == nil {
		err = tx2.Commit(ctx2)
	}
	if err != nil {
		_ = tx2.Rollback(ctx2)
		return err
	}
	return rdb.XAck(ctx, stream, "raw", m.ID).Err()
}
