package redisstream

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/internal/redact"
)

// conn is a run's Redis client, and its server when the runner's own.
type conn struct {
	rdb *redis.Client
	srv *redisserver.Server
}

// open connects to the Redis at url (the runner's own when own is not nil).
func open(ctx context.Context, h broker.Host, url string, own broker.Process) (broker.Conn, error) {
	var c conn
	c.srv, _ = own.(*redisserver.Server)
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flagName, redact.URL(url), redact.Err(url, err))
	}
	if c.srv != nil {
		// Our own broker is only ever down because a step made it so: a
		// refused dial is the answer, not a blip to retry for seconds
		// (go-redis: 5 dial attempts 100 ms apart, per command retry).
		opt.DialerRetries, opt.DialerRetryTimeout, opt.MaxRetries = 1, 10*time.Millisecond, 1
	}
	c.rdb = redis.NewClient(opt)
	h.Defer(func(context.Context) error { return c.rdb.Close() })
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", redact.URL(url), redact.Err(url, err))
	}
	return c, nil
}

// Client is the run's Redis client (the raw baseline of soak and bench).
func (c conn) Client() *redis.Client { return c.rdb }

func (c conn) New(_ context.Context, key string, _ broker.Scenario) (broker.Broker, error) {
	return New(c.rdb, key), nil
}

func (c conn) Server() (broker.Process, string) {
	if c.srv == nil {
		return nil, ""
	}
	return c.srv, ""
}

func (c conn) Ready(context.Context) error { return nil } // go-redis dials anew

// Hints tell how to look at a kept scenario's stream.
func (c conn) Hints(key string) []string {
	rc := c.rdb.Options()
	host, port, _ := strings.Cut(rc.Addr, ":")
	cli := fmt.Sprintf("redis-cli -h %s -p %s -n %d", host, port, rc.DB)
	return []string{
		"stream:      " + cli + " XRANGE " + key + " - +",
		"groups:      " + cli + " XINFO GROUPS " + key,
		"pending:     " + cli + " XPENDING " + key + " <consumer-id>",
	}
}

// leaseTTL is how long a run's lease key outlives the run's last refresh
// (every leaseTTL/3).
const leaseTTL = 15 * time.Second

// Lease is a key (drill:lease:ID) that expires leaseTTL after the run last
// refreshed it; the runner's own Redis goes with the run and needs none.
func (c conn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	if c.srv != nil {
		return func(context.Context) error { return nil }, nil
	}
	key := broker.LeaseName(":", runID)
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

// leftoverKey is a scenario's stream key or its dead letters and seen set:
// drill:ID:N, and nothing else.
var leftoverKey = lazy.Regexp(`^` + broker.NamePrefix + `:` + broker.RunIDForm + `:` + broker.CounterForm + `(:dlq|:seen)?$`)

// leftoverType is the type the runner gives a key of leftoverKey's shape
// (by its suffix): the stream and its dead letters are streams (XADD), the
// seen set a hash (HSETNX). A key of that name and another type is not
// the runner's.
func leftoverType(key string) string {
	if strings.HasSuffix(key, ":seen") {
		return "hash"
	}
	return "stream"
}

// delOfType deletes KEYS[1] if it is of type ARGV[1], in one step (no
// other client's write comes between the check and the delete): 1 if it
// did, 0 if the key is gone, -1 if it is of another type.
var delOfType = redis.NewScript(`local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then return 0 end
if t ~= ARGV[1] then return -1 end
return redis.call('DEL', KEYS[1])`)

// Clean deletes the stream keys of runs whose lease key is gone.
func (c conn) Clean(ctx context.Context) (broker.Cleaned, error) {
	var out broker.Cleaned
	live := map[string]bool{}
	iter := c.rdb.Scan(ctx, 0, broker.NamePrefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if !leftoverKey().MatchString(key) {
			continue
		}
		run := broker.RunOf(key)
		l, seen := live[run]
		if !seen {
			n, err := c.rdb.Exists(ctx, broker.LeaseName(":", run)).Result()
			if err != nil {
				return out, err
			}
			l, live[run] = n > 0, n > 0
		}
		if l {
			out.Live = append(out.Live, key)
			continue
		}
		n, err := delOfType.Run(ctx, c.rdb, []string{key}, leftoverType(key)).Int()
		if err != nil {
			return out, err
		}
		switch n {
		case 1:
			out.Dropped = append(out.Dropped, key)
		case -1:
			out.Notes = append(out.Notes, fmt.Sprintf("Redis key %s is not a %s as the runner makes it: not the runner's, left alone", key, leftoverType(key)))
		}
	}
	return out, iter.Err()
}
