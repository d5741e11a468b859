package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// relay drains payment_outbox: each unsent row, oldest first, is published
// with XADD and then marked sent in the same transaction that locked it. A
// crash between the two publishes the row again after a restart: the
// consumer's processed_messages must absorb that duplicate. The lock (FOR
// UPDATE SKIP LOCKED) lets replicas drain one outbox side by side, each
// row published by one of them.
func relay(ctx context.Context, bug string) error {
	unsent := `SELECT id, message_id, body::text FROM payment_outbox
	           WHERE sent_at IS NULL ORDER BY id LIMIT 50 FOR UPDATE SKIP LOCKED`
	if bug == "no-skip-locked" {
		// The rows are read without a lock: two replicas read the same
		// unsent rows and both publish them (the second mark waits for
		// the first, then marks the row again).
		unsent = `SELECT id, message_id, body::text FROM payment_outbox
		          WHERE sent_at IS NULL ORDER BY id LIMIT 50`
	}
	pool, err := newPool(ctx, map[string]string{
		"unsent_payments":   unsent,
		"mark_payment_sent": `UPDATE payment_outbox SET sent_at = now() WHERE id = $1`,
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	rdb := redis.NewClient(redisOptions())
	defer rdb.Close()
	stream := env("STREAM")
	pause, err := publishPause()
	if err != nil {
		return err
	}
	log.SetFlags(0)
	log.Printf("payments relay ready (stream %s)", stream)
	for ctx.Err() == nil {
		relay := relayBatch
		if bug == "mark-first" {
			relay = markFirstBatch
		}
		n, err := relay(ctx, pool, rdb, stream, bug == "double-publish", pause)
		if err != nil {
			log.Printf("relay: %v; retrying", err)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		if n == 0 {
			sleep(ctx, 25*time.Millisecond)
		}
	}
	return nil
}

type outboxRow struct {
	id        int64
	messageID string
	body      string
}

func relayBatch(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client, stream string, twice bool, pause time.Duration) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, "unsent_payments")
	if err != nil {
		return 0, err
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		return o, r.Scan(&o.id, &o.messageID, &o.body)
	})
	if err != nil {
		return 0, err
	}
	for _, o := range batch {
		publishes := 1
		if twice {
			publishes = 2
		}
		for range publishes {
			entry, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"messageId", o.messageID, "body", o.body}}).Result()
			if err != nil {
				return 0, fmt.Errorf("XADD %s: %w", o.messageID, err)
			}
			log.Printf("published %s as %s", o.messageID, entry)
			sleep(ctx, pause)
		}
		if _, err := tx.Exec(ctx, "mark_payment_sent", o.id); err != nil {
			return 0, err
		}
	}
	return len(batch), tx.Commit(ctx)
}

// markFirstBatch is BUG=mark-first: the rows are marked sent and
// committed before they are published, so a crash in between loses them.
func markFirstBatch(ctx context.Context, pool *pgxpool.Pool, rdb *redis.Client, stream string, _ bool, _ time.Duration) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, "unsent_payments")
	if err != nil {
		return 0, err
	}
	batch, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		return o, r.Scan(&o.id, &o.messageID, &o.body)
	})
	if err != nil {
		return 0, err
	}
	for _, o := range batch {
		if _, err := tx.Exec(ctx, "mark_payment_sent", o.id); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	for _, o := range batch {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"messageId", o.messageID, "body", o.body}}).Err(); err != nil {
			return 0, fmt.Errorf("XADD %s: %w", o.messageID, err)
		}
		log.Printf("published %s", o.messageID)
	}
	return len(batch), nil
}

// publishPause is PUBLISH_PAUSE, the relay's rate limit: a pause after
// each publish (as a relay that spares its broker keeps), 0 when unset.
func publishPause() (time.Duration, error) {
	v := os.Getenv("PUBLISH_PAUSE")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("PUBLISH_PAUSE=%q: want a duration such as 20ms", v)
	}
	return d, nil
}

// newPool connects a pgxpool whose connections prepare the given named
// statements.
func newPool(ctx context.Context, statements map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(env("DATABASE_URL"))
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		for name, sql := range statements {
			if _, err := c.Prepare(ctx, name, sql); err != nil {
				return fmt.Errorf("prepare %s: %w", name, err)
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func redisOptions() *redis.Options {
	opt, err := redis.ParseURL(env("REDIS_URL"))
	if err != nil {
		log.Fatalf("REDIS_URL: %v", err)
	}
	return opt
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
