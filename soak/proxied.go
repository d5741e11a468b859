package soak

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"net"
	"net/url"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/proxy/pgwire"
	"github.com/outboxdrill/runner/proxy/resp"
	"github.com/outboxdrill/runner/runner"
)

// viaProxies opens a second session on sess's servers that reaches them
// through unarmed protocol proxies only (PostgreSQL wire for every
// database connection, RESP for Redis): the same schedules run on it cost
// what drilling a team's service costs when no fault is armed.
func viaProxies(ctx context.Context, sess *runner.Session, rp runner.Params) (*runner.Session, func(), error) {
	var closers []func()
	undo := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	w := sess.World()
	pgURL, closePG, err := proxiedPG(w.PGURL)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, closePG)
	redisURL, closeRedis, err := proxiedRedis(w.BrokerURL(pipeline.Broker))
	if err != nil {
		undo()
		return nil, nil, err
	}
	closers = append(closers, closeRedis)
	rp.PGURL, rp.URLs = pgURL, map[string]string{pipeline.Broker: redisURL}
	proxied, err := runner.OpenSession(ctx, rp)
	if err != nil {
		undo()
		return nil, nil, err
	}
	closers = append(closers, func() { _ = proxied.Close() })
	return proxied, undo, nil
}

// proxiedPG is the admin URL of the PostgreSQL server at u through a
// proxy of its own (no TLS: the proxy speaks the plain protocol).
func proxiedPG(u string) (string, func(), error) {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "", nil, fmt.Errorf("PostgreSQL %s: %w", redact.URL(u), redact.Err(u, err))
	}
	p, err := pgwire.Listen(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		return "", nil, err
	}
	via := url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: p.Addr(), Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		via.User = url.UserPassword(cfg.User, cfg.Password)
	}
	return via.String(), func() { p.Close() }, nil
}

// proxiedRedis is the URL of the Redis server at u through a proxy of its
// own.
func proxiedRedis(u string) (string, func(), error) {
	if u == "" {
		return "", nil, errors.New("the proxied soak needs Redis")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		return "", nil, fmt.Errorf("Redis %s: %w", redact.URL(u), redact.Err(u, err))
	}
	p, err := resp.Listen(opt.Addr)
	if err != nil {
		return "", nil, err
	}
	via := url.URL{Scheme: "redis", Host: p.Addr(), Path: "/" + strconv.Itoa(opt.DB)}
	if opt.Username != "" || opt.Password != "" {
		via.User = url.UserPassword(opt.Username, opt.Password)
	}
	return via.String(), func() { p.Close() }, nil
}
