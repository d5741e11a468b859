package soak

import (
	"context"
	"errors"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/proxy/pgwire"
	"github.com/outboxdrill/runner/proxy/resp"
	"github.com/outboxdrill/runner/runner"
)

// viaProxies is the soak's pipeline with every connection through an
// unarmed protocol proxy (PostgreSQL wire for both databases, RESP for
// Redis): what drilling a team's service costs when no fault is armed.
func viaProxies(ctx context.Context, w *runner.World, pair *runner.Pair) (pipelineEnv, func(), error) {
	var closers []func()
	undo := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	pools := [2]*pgxpool.Pool{}
	for i, direct := range []*pgxpool.Pool{pair.Env.Producer, pair.Env.Consumer} {
		cfg := direct.Config().Copy()
		cc := cfg.ConnConfig
		p, err := pgwire.Listen(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
		if err != nil {
			undo()
			return pipelineEnv{}, nil, err
		}
		closers = append(closers, func() { p.Close() })
		host, port, _ := net.SplitHostPort(p.Addr())
		n, _ := strconv.Atoi(port)
		cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = host, uint16(n), nil, nil
		if pools[i], err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			undo()
			return pipelineEnv{}, nil, err
		}
		pool := pools[i]
		closers = append(closers, pool.Close)
	}
	rdb := w.RedisClient()
	if rdb == nil {
		undo()
		return pipelineEnv{}, nil, errors.New("the proxied soak needs Redis")
	}
	opt := *rdb.Options()
	rp, err := resp.Listen(opt.Addr)
	if err != nil {
		undo()
		return pipelineEnv{}, nil, err
	}
	closers = append(closers, func() { rp.Close() })
	opt.Addr = rp.Addr()
	prdb := redis.NewClient(&opt)
	closers = append(closers, func() { prdb.Close() })
	b := redisstream.New(prdb, pair.Stream)
	return pipelineEnv{
		prod:  &pipeline.Producer{DB: pools[0]},
		relay: &pipeline.Relay{DB: pools[0], Broker: b},
		cons:  &pipeline.Consumer{DB: pools[1], Broker: b},
		b:     b,
	}, undo, nil
}
