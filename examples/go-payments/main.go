// Command payments is a payments team's outbox relay and inbox consumer, as
// a team would write them (pgxpool with named prepared statements, go-redis
// with XREADGROUP … BLOCK and XAUTOCLAIM, jsonb bodies, its own table and
// column names), drilled unchanged by the runner through its proxies:
//
//	payments relay      publish payment_outbox rows to the stream, then mark them sent
//	payments consumer   apply each payment to account_balances once, keyed in processed_messages
//
// Env: DATABASE_URL, REDIS_URL, STREAM, GROUP for the consumer, PUBLISH_PAUSE
// for the relay (a pause after each publish, its rate limit). BUG picks
// one known mistake (default: none, the correct service):
//
//	no-retry         consumer: a failed transaction is neither retried nor claimed; it reads on
//	entry-id-dedupe  consumer: dedupes on the broker's entry id, not the business message id
//	upsert           consumer: a known message id with another body overwrites the row and is applied again
//	ack-first        consumer: XACK before the transaction
//	split-tx         consumer: the processed row and the balance in two transactions
//	out-of-order     consumer: a read batch applied as parallel workers would, last entry first (in reverse)
//	double-publish   relay: publishes each row twice before marking it
//	mark-first       relay: marks the rows sent and commits, then publishes them
//	no-skip-locked   relay: reads the unsent rows without FOR UPDATE SKIP LOCKED: replicas race and publish rows twice
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "relay" && os.Args[1] != "consumer") {
		fmt.Fprintln(os.Stderr, "usage: payments relay|consumer (env DATABASE_URL, REDIS_URL, STREAM, GROUP; BUG)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	bug := os.Getenv("BUG")
	var err error
	if os.Args[1] == "relay" {
		err = relay(ctx, bug)
	} else {
		err = consumer(ctx, bug)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// env is a required environment variable.
func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fmt.Fprintf(os.Stderr, "%s is not set\n", name)
		os.Exit(2)
	}
	return v
}
