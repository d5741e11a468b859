package redisstream

import (
	"bytes"
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
)

// flagName is the CLI flag of a Redis URL (--redis), also named in errors.
const flagName = "redis"

// Kind is Redis Streams as the runner knows it (broker/kinds registers it).
var Kind = &broker.Kind{
	Name: broker.Redis, Title: "Redis", Product: "Redis Streams",
	Flag: flagName, Env: "RUNNER_REDIS_URL",
	FlagUsage: "the Redis server at `URL`", Own: "one", Want: "a Redis URL",
	Ports:        map[string]string{"redis": "6379", "rediss": "6379"},
	Placeholders: []string{"stream", "group"},
	EntryFields:  true,
	Pipelined:    "XADD",
	Probe: broker.Probe{
		// PING: +PONG, or an error such as -NOAUTH: a Redis either way.
		Protocol: "Redis", Hello: []byte("PING\r\n"), Need: 1,
		OK:    func(a []byte) bool { return a[0] == '+' || a[0] == '-' },
		Addrs: probeAddrs,
		Guess: func(a []byte) string {
			if len(a) > 0 && (a[0] == '+' || a[0] == '-') && bytes.HasSuffix(a, []byte("\r\n")) {
				return "a Redis server"
			}
			return ""
		},
	},
	Capabilities: capabilities,

	Start:  start,
	Open:   open,
	Dir:    redisserver.Dir,
	Limits: limits,
	Verbs:  broker.Verbs{Publish: "XADD", Read: "XREADGROUP", Ack: "XACK", Claim: "XCLAIM"},
	Mechanisms: map[broker.Mechanism]string{
		broker.SecondPublish: "a second entry (XADD always appends)",
		broker.Takeover:      "XCLAIM / XAUTOCLAIM with a minimum idle time: per entry, never from a busy worker",
		broker.RolledBack:    "no negative ack: it stays in the PEL with its worker until a claim",
		broker.Inspection:    "XPENDING: per entry, with owner, idle time and delivery count",
		broker.DeadLetters:   "application-level only: a second stream",
		broker.Durability:    "the managed server runs AOF `appendfsync always`: fsync before the XADD reply; a SIGKILL loses nothing acknowledged",
	},
}

func probeAddrs(url string) ([]broker.Addr, bool, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, false, err
	}
	return []broker.Addr{{Network: opt.Network, Addr: opt.Addr}}, opt.TLSConfig == nil, nil
}

// start starts the runner's own Redis.
func start(ctx context.Context, h broker.Host) (string, broker.Process, error) {
	srv, err := redisserver.Start(ctx, redisserver.Options{})
	if err != nil {
		return "", nil, err
	}
	h.DeferStop(srv.Discard)
	h.Logf("started Redis pid %d on port %d in %s", srv.PID(), srv.Port, srv.Dir)
	return srv.URL, srv, nil
}
