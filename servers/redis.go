package servers

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Redis is a throwaway Redis server owned by this process. Stop and Halt
// send SIGTERM: Redis fsyncs the AOF and exits. Kill keeps Dir and its AOF,
// so Start brings the same data back.
type Redis struct {
	URL  string // redis://127.0.0.1:PORT/0; the same after Kill and Start
	Port int
	Dir  string // temp dir holding the AOF and redis.log

	binary  string
	logPath string

	lifecycle[int]
}

// RedisOptions configure StartRedis.
type RedisOptions struct {
	Binary string // path to redis-server; empty: "redis-server" from PATH
}

// StartRedis starts redis-server in a temp dir on a free loopback port and
// returns once it answers PING.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	bin, err := findRedis(opts.Binary)
	if err != nil {
		return nil, err
	}
	dir, err := makeDir(RedisDir)
	if err != nil {
		return nil, err
	}
	r := newRedis(bin, dir)
	if err := r.start(ctx, nil); err != nil {
		return nil, err
	}
	r.Port = r.ports
	r.URL = fmt.Sprintf("redis://%s/0", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)))
	return r, nil
}

func newRedis(bin, dir string) *Redis {
	r := &Redis{Dir: dir, binary: bin, logPath: filepath.Join(dir, "redis.log")}
	r.lifecycle = lifecycle[int]{
		name: "redis-server", dir: dir, stopSignal: syscall.SIGTERM,
		freePorts: freePort, launch: r.launch,
	}
	return r
}

// launch starts redis-server on port and waits until it answers. Every
// write is appended to the AOF and fsynced before it is acknowledged (a
// product requirement); RDB snapshots are off so the AOF is the only
// persistence. stdout and stderr go to the log too: errors found before
// Redis opens --logfile (bad arguments) are printed there.
func (r *Redis) launch(ctx context.Context, port int) (*child, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
		"--daemonize", "no",
		"--logfile", r.logPath,
	}
	return launchSpec{
		name: "redis-server", logPath: r.logPath,
		command: func(out io.Writer) *exec.Cmd { return newCmd(r.binary, args, r.Dir, out, nil) },
		probe:   func(ctx context.Context, c *child) error { return probeRedis(ctx, addr, c.pid()) },
	}.run(ctx, (*child).kill)
}

// probeRedis succeeds once the server at addr is ours (its INFO names pid)
// and answers PING (not LOADING). It dials itself so go-redis neither retries
// nor logs the refused connections expected while the server starts.
func probeRedis(ctx context.Context, addr string, pid int) error {
	conn, stop, err := dialProbe(ctx, addr)
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{
		Addr:            addr,
		Dialer:          func(context.Context, string, string) (net.Conn, error) { return conn, nil },
		Protocol:        2,
		DisableIdentity: true,
		MaxRetries:      -1,
		PoolSize:        1,
		// A stranger that won the port may accept and never answer.
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	if want := "process_id:" + strconv.Itoa(pid); !strings.Contains(info, want+"\r\n") {
		return fmt.Errorf("%s is served by another Redis", addr)
	}
	return rdb.Ping(ctx).Err()
}

// findRedis resolves the redis-server binary.
func findRedis(binary string) (string, error) {
	return findProgram(binary, "redis-server", "Redis server binary",
		`install the Debian package "redis-server" (apt-get install redis-server), or pass --redis URL (RUNNER_REDIS_URL) to use a running server`)
}
