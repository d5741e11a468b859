package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/pipeline"
)

// cmdReference runs the reference pipeline's relay or consumer as a
// long-lived process configured by its environment, the way a team's own
// service runs: so that the runner can drill it through a system file and
// show the same verdicts as the in-process steps (parity).
//
//	DATABASE_URL  the producer's (relay) or the consumer's (consumer) database
//	REDIS_URL     the Redis the stream is on
//	STREAM        the stream key
//	GROUP         the consumer id (consumer only; default accounting)
func cmdReference(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("reference")
	interval := fs.Duration("interval", 20*time.Millisecond, "how long to wait when there is nothing to do")
	// 250 ms: a handling takes milliseconds, so an entry idle that long is
	// a dead worker's or one left pending to retry (an identity conflict);
	// a longer idle only makes every drill wait for the retry that shows
	// the entry is not stranded (1 s made settling a point 1.1 s, 250 ms 0.3 s).
	claimIdle := fs.Duration("claim-idle", 250*time.Millisecond, "consumer: reclaim entries pending this long (a dead worker's, or one left to retry)")
	ackFirst := fs.Bool("ack-first", os.Getenv("ACK_FIRST") != "", "consumer: the anti-pattern of acknowledging before the transaction (env ACK_FIRST)")
	rest, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(rest) != 1 || rest[0] != "relay" && rest[0] != "consumer" {
		fmt.Fprintln(stderr, "runner reference: want relay or consumer")
		return exitInvalid
	}
	env := map[string]string{}
	for _, k := range []string{"DATABASE_URL", "REDIS_URL", "STREAM", "GROUP"} {
		env[k] = os.Getenv(k)
	}
	if env["GROUP"] == "" {
		env["GROUP"] = "accounting"
	}
	for _, k := range []string{"DATABASE_URL", "REDIS_URL", "STREAM"} {
		if env[k] == "" {
			fmt.Fprintf(stderr, "runner reference %s: %s is not set\n", rest[0], k)
			return exitInvalid
		}
	}
	db, err := pgxpool.New(ctx, env["DATABASE_URL"])
	if err != nil {
		fmt.Fprintf(stderr, "runner reference: %s: %v\n", redact.URL(env["DATABASE_URL"]), redact.Err(env["DATABASE_URL"], err))
		return exitInvalid
	}
	defer db.Close()
	opt, err := redis.ParseURL(env["REDIS_URL"])
	if err != nil {
		fmt.Fprintf(stderr, "runner reference: %s: %v\n", redact.URL(env["REDIS_URL"]), redact.Err(env["REDIS_URL"], err))
		return exitInvalid
	}
	opt.MaxRetries = -1 // a retried command would hide the drill's fault
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	b := redisstream.New(rdb, env["STREAM"])
	fmt.Fprintf(stdout, "reference %s ready\n", rest[0])
	if rest[0] == "relay" {
		relayLoop(ctx, &pipeline.Relay{DB: db, Broker: b}, *interval, stdout)
	} else {
		c := &pipeline.Consumer{DB: db, Broker: b}
		consumeLoop(ctx, c, pipeline.ConsumeOptions{Consumer: env["GROUP"], Worker: fmt.Sprintf("w%d", os.Getpid()), Count: 10, AckFirst: *ackFirst}, *interval, *claimIdle, stdout)
	}
	return exitOK
}

func relayLoop(ctx context.Context, r *pipeline.Relay, interval time.Duration, out io.Writer) {
	for ctx.Err() == nil {
		res, err := r.Relay(ctx, pipeline.RelayOptions{Limit: 100})
		for _, p := range res.Published {
			fmt.Fprintf(out, "published %s as %s\n", p.EventID, p.EntryID)
		}
		if err != nil {
			fmt.Fprintf(out, "relay: %v\n", err)
		}
		if err != nil || len(res.Published) == 0 {
			pause(ctx, interval)
		}
	}
}

func consumeLoop(ctx context.Context, c *pipeline.Consumer, opt pipeline.ConsumeOptions, interval, claimIdle time.Duration, out io.Writer) {
	for ctx.Err() == nil {
		read := opt
		read.Block = interval
		res, err := c.Consume(ctx, read)
		printHandled(out, "read", res, err)
		claim := opt
		claim.Idle = claimIdle
		res2, err := c.Claim(ctx, claim)
		printHandled(out, "claim", res2, err)
		if err != nil {
			pause(ctx, interval)
		}
	}
}

func printHandled(out io.Writer, how string, res pipeline.ConsumeResult, err error) {
	for _, h := range res.Handled {
		fmt.Fprintf(out, "%s %s (%s): %s acked=%v\n", how, h.ID, h.EventID, h.Outcome, h.Acked)
	}
	if err != nil && err != context.Canceled {
		fmt.Fprintf(out, "%s: %v\n", how, err)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
