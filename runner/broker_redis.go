package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
)

func init() { brokerKinds[broker.Redis] = openRedis }

// redisConn is the run's Redis client, and its server when the runner's own.
type redisConn struct {
	rdb *redis.Client
	srv *servers.Redis
}

func (c redisConn) New(_ context.Context, key string, _ *scenario.Scenario) (broker.Broker, error) {
	return redisstream.New(c.rdb, key), nil
}

func (c redisConn) Server() (proc, string) {
	if c.srv == nil {
		return nil, notOurs("Redis", "--redis")
	}
	return c.srv, ""
}

func (c redisConn) Ready(context.Context) error { return nil } // go-redis dials anew

// openRedis connects to the Redis at url, or starts the runner's own.
func openRedis(ctx context.Context, w *World, url string, p *Params) (brokerConn, error) {
	var c redisConn
	if url == "" {
		srv, err := servers.StartRedis(ctx, servers.RedisOptions{})
		if err != nil {
			return nil, err
		}
		w.undo.add(srv.Discard)
		c.srv, url = srv, srv.URL
		p.logf("started Redis pid %d on port %d in %s", srv.PID(), srv.Port, srv.Dir)
	}
	w.setBrokerURL(broker.Redis, url)
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--redis %s: %w", redact.URL(url), redact.Err(url, err))
	}
	if c.srv != nil {
		// Our own broker is only ever down because a step made it so: a
		// refused dial is the answer, not a blip to retry for seconds
		// (go-redis: 5 dial attempts 100 ms apart, per command retry).
		opt.DialerRetries, opt.DialerRetryTimeout, opt.MaxRetries = 1, 10*time.Millisecond, 1
	}
	c.rdb = redis.NewClient(opt)
	w.undo.add(func(context.Context) error { return c.rdb.Close() })
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", redact.URL(url), redact.Err(url, err))
	}
	return c, nil
}

// Hints tell how to look at a kept scenario's stream.
func (c redisConn) Hints(key string) []string {
	rc := c.rdb.Options()
	host, port, _ := strings.Cut(rc.Addr, ":")
	cli := fmt.Sprintf("redis-cli -h %s -p %s -n %d", host, port, rc.DB)
	return []string{
		"stream:      " + cli + " XRANGE " + key + " - +",
		"groups:      " + cli + " XINFO GROUPS " + key,
		"pending:     " + cli + " XPENDING " + key + " <consumer-id>",
	}
}

// Lease is a key (drill:lease:ID) that expires leaseTTL after the run last
// refreshed it; the runner's own Redis goes with the run and needs none.
func (c redisConn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	if c.srv != nil {
		return func(context.Context) error { return nil }, nil
	}
	key := leaseName(":", runID)
	if err := c.rdb.Set(ctx, key, "1", leaseTTL).Err(); err != nil {
		return nil, err
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(leaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), leaseTTL/3)
				_ = c.rdb.Set(ctx, key, "1", leaseTTL).Err() // a blip: the next tick tries again
				cancel()
			}
		}
	}()
	return func(ctx context.Context) error {
		close(stop)
		<-done
		return c.rdb.Del(ctx, key).Err()
	}, nil
}

// Clean deletes the stream keys of runs whose lease key is gone.
func (c redisConn) Clean(ctx context.Context) (Cleaned, error) {
	var out Cleaned
	live := map[string]bool{}
	iter := c.rdb.Scan(ctx, 0, namePrefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if !leftoverKey.MatchString(key) {
			continue
		}
		run := runOf(key)
		l, seen := live[run]
		if !seen {
			n, err := c.rdb.Exists(ctx, leaseName(":", run)).Result()
			if err != nil {
				return out, err
			}
			l, live[run] = n > 0, n > 0
		}
		if l {
			out.Live = append(out.Live, key)
			continue
		}
		if err := c.rdb.Del(ctx, key).Err(); err != nil {
			return out, err
		}
		out.Dropped = append(out.Dropped, key)
	}
	return out, iter.Err()
}
