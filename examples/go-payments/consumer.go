package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The consumer's statements, prepared by name on every pooled connection.
var consumerStatements = map[string]string{
	// processed_messages is the inbox: one row per subscriber and message id.
	"record_message": `INSERT INTO processed_messages (subscriber, message_id, body) VALUES ($1, $2, $3::jsonb)
	                   ON CONFLICT (subscriber, message_id) DO NOTHING`,
	"recorded_body_matches": `SELECT body = $3::jsonb FROM processed_messages WHERE subscriber = $1 AND message_id = $2`,
	// BUG=upsert: the last body wins, and the payment is applied again.
	"overwrite_message": `INSERT INTO processed_messages (subscriber, message_id, body) VALUES ($1, $2, $3::jsonb)
	                      ON CONFLICT (subscriber, message_id) DO UPDATE SET body = EXCLUDED.body, processed_at = now()`,
	"credit_balance": `INSERT INTO account_balances (subscriber, currency, total_minor, event_count) VALUES ($1, $2, $3, 1)
	                   ON CONFLICT (subscriber, currency) DO UPDATE
	                   SET total_minor = account_balances.total_minor + EXCLUDED.total_minor,
	                       event_count = account_balances.event_count + 1`,
}

// payment is the body the producer wrote: amount in minor units.
type payment struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type consumerSvc struct {
	bug           string
	pool          *pgxpool.Pool
	rdb           *redis.Client
	stream, group string
	me            string
}

// consumer applies each payment once: in ONE transaction, the message id
// is recorded in processed_messages and the balance credited; the entry is
// acknowledged only after the COMMIT. A failed transaction leaves the
// entry pending: XAUTOCLAIM takes it back once idle for a second. A known
// message id with the same body is a duplicate (acked, no effect); with
// another body it is an identity conflict, left pending for a human.
func consumer(ctx context.Context, bug string) error {
	pool, err := newPool(ctx, consumerStatements)
	if err != nil {
		return err
	}
	defer pool.Close()
	c := &consumerSvc{bug: bug, pool: pool, rdb: redis.NewClient(redisOptions()), stream: env("STREAM"), group: env("GROUP"),
		me: fmt.Sprintf("payments-%d", os.Getpid())}
	defer c.rdb.Close()
	log.SetFlags(0)
	if err := c.rdb.XGroupCreateMkStream(ctx, c.stream, c.group, "0").Err(); err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("XGROUP CREATE: %w", err)
	}
	log.Printf("payments consumer ready (stream %s, group %s, bug %q)", c.stream, c.group, bug)
	for ctx.Err() == nil {
		if bug != "no-retry" {
			claimed, _, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: c.stream, Group: c.group, Consumer: c.me,
				MinIdle: time.Second, Start: "0-0", Count: 10}).Result()
			if err != nil && ctx.Err() == nil {
				log.Printf("XAUTOCLAIM: %v", err)
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			for _, m := range claimed {
				c.handle(ctx, m, "claimed")
			}
		}
		res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: c.group, Consumer: c.me, Streams: []string{c.stream, ">"},
			Count: 10, Block: 250 * time.Millisecond}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Printf("XREADGROUP: %v", err)
				sleep(ctx, 200*time.Millisecond)
			}
			continue
		}
		for _, s := range res {
			msgs := s.Messages
			if bug == "out-of-order" {
				// As if the batch went to parallel workers and the last
				// finished first: deterministically, in reverse.
				slices.Reverse(msgs)
			}
			for _, m := range msgs {
				c.handle(ctx, m, "read")
			}
		}
	}
	return nil
}

// handle applies one entry and acks it when it is done with it.
func (c *consumerSvc) handle(ctx context.Context, m redis.XMessage, how string) {
	id, _ := m.Values["messageId"].(string)
	body, _ := m.Values["body"].(string)
	var p payment
	if err := json.Unmarshal([]byte(body), &p); err != nil || id == "" || p.Currency == "" {
		log.Printf("%s %s: not a payment (messageId %q, body %q): left pending", how, m.ID, id, body)
		return
	}
	key := id
	if c.bug == "entry-id-dedupe" {
		key = m.ID // the broker's id: a re-published payment looks new
	}
	if c.bug == "ack-first" {
		c.ack(ctx, m.ID)
	}
	outcome, conflict, err := c.apply(ctx, key, body, p)
	if err != nil {
		log.Printf("%s %s (%s): %v; left pending", how, m.ID, id, err)
		return
	}
	log.Printf("%s %s (%s): %s", how, m.ID, id, outcome)
	if !conflict && c.bug != "ack-first" {
		c.ack(ctx, m.ID)
	}
}

func (c *consumerSvc) ack(ctx context.Context, entry string) {
	if err := c.rdb.XAck(ctx, c.stream, c.group, entry).Err(); err != nil {
		log.Printf("XACK %s: %v", entry, err)
	}
}

// apply records the message and credits the balance, in one transaction
// (two with BUG=split-tx). conflict: the message id is known with another
// body; nothing was applied and the entry stays pending.
func (c *consumerSvc) apply(ctx context.Context, key, body string, p payment) (outcome string, conflict bool, err error) {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return "", false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	record := "record_message"
	if c.bug == "upsert" {
		record = "overwrite_message"
	}
	tag, err := tx.Exec(ctx, record, c.group, key, body)
	if err != nil {
		return "", false, err
	}
	if tag.RowsAffected() == 0 {
		var same bool
		if err := tx.QueryRow(ctx, "recorded_body_matches", c.group, key, body).Scan(&same); err != nil {
			return "", false, err
		}
		if !same {
			return "identity conflict: another body under this message id; left pending", true, nil
		}
		return "duplicate: already applied", false, tx.Commit(ctx)
	}
	if c.bug == "split-tx" {
		if err := tx.Commit(ctx); err != nil {
			return "", false, err
		}
		if tx, err = c.pool.Begin(ctx); err != nil {
			return "", false, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
	}
	if _, err := tx.Exec(ctx, "credit_balance", c.group, p.Currency, p.Amount); err != nil {
		return "", false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("applied %d %s", p.Amount, p.Currency), false, nil
}
