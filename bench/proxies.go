package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/pgwire"
	"github.com/outboxdrill/runner/proxy/resp"
	"github.com/outboxdrill/runner/runner"
)

// roundTrips are one protocol's round-trip times, direct and through an
// unarmed proxy.
type roundTrips struct {
	what            string
	direct, proxied []time.Duration
}

// percentile of sorted durations (p in 0..100).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

func (r roundTrips) figure() string {
	slices.Sort(r.direct)
	slices.Sort(r.proxied)
	return fmt.Sprintf("+%s p50, +%s p99", us(percentile(r.proxied, 50)-percentile(r.direct, 50)), us(percentile(r.proxied, 99)-percentile(r.direct, 99)))
}

func (r roundTrips) note() string {
	return fmt.Sprintf("%s: direct %s / %s, proxied %s / %s (p50 / p99, %d each, interleaved)", r.what,
		us(percentile(r.direct, 50)), us(percentile(r.direct, 99)), us(percentile(r.proxied, 50)), us(percentile(r.proxied, 99)), len(r.direct))
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// proxyLatency measures what the protocol proxies add to one round trip:
// SELECT 1 on PostgreSQL, PING on Redis; n of each, direct and proxied in
// turn so that both see the same machine load.
func proxyLatency(ctx context.Context, p Params, n int) ([]roundTrips, error) {
	w, err := runner.OpenWorld(ctx, &runner.Params{PGURL: p.PGURL, URLs: map[string]string{broker.Redis: p.Redis}, Parallel: 1, ConnectTimeout: p.ConnectTimeout})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	pair, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		return nil, err
	}
	defer w.ReturnPair(ctx, pair)
	cc := pair.Env.Producer.Config().ConnConfig.Copy()
	pg, err := pgwire.Listen(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		return nil, err
	}
	defer pg.Close()
	direct, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer direct.Close(ctx)
	host, port, _ := net.SplitHostPort(pg.Addr())
	pn, _ := strconv.Atoi(port)
	pcc := cc.Copy()
	pcc.Host, pcc.Port, pcc.TLSConfig, pcc.Fallbacks = host, uint16(pn), nil, nil
	proxied, err := pgx.ConnectConfig(ctx, pcc)
	if err != nil {
		return nil, err
	}
	defer proxied.Close(ctx)
	pgRT := roundTrips{what: "PostgreSQL SELECT 1"}
	for range n {
		for i, c := range []*pgx.Conn{direct, proxied} {
			start := time.Now()
			if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
				return nil, err
			}
			if i == 0 {
				pgRT.direct = append(pgRT.direct, time.Since(start))
			} else {
				pgRT.proxied = append(pgRT.proxied, time.Since(start))
			}
		}
	}
	opt := *w.RedisClient().Options()
	rp, err := resp.Listen(opt.Addr)
	if err != nil {
		return nil, err
	}
	defer rp.Close()
	popt := opt
	popt.Addr = rp.Addr()
	rd, rpx := redis.NewClient(&opt), redis.NewClient(&popt)
	defer rd.Close()
	defer rpx.Close()
	redisRT := roundTrips{what: "Redis PING"}
	for range n {
		for i, c := range []*redis.Client{rd, rpx} {
			start := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				return nil, err
			}
			if i == 0 {
				redisRT.direct = append(redisRT.direct, time.Since(start))
			} else {
				redisRT.proxied = append(redisRT.proxied, time.Since(start))
			}
		}
	}
	return []roundTrips{pgRT, redisRT}, nil
}
