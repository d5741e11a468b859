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
