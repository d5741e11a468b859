// Package redisserver starts the runner's own throwaway Redis: a
// redis-server in a temp dir on a free loopback port, its AOF fsynced on
// every write, under the servers package's lifecycle (kill, halt, start
// again, stop). It is its own package, beside the Redis Streams adapter,
// so that internal/testservers, which the adapter's tests import, can
// start the tests' Redis without a cycle.
package redisserver

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

	"github.com/outboxdrill/runner/servers"
)

// Dir is the KIND of the server's dir, drill-redis-* (broker.Kind.Dir):
// `runner clean` looks for it.
const Dir = "redis"

// Server is a throwaway Redis server owned by this process. Stop and Halt
// send SIGTERM: Redis fsyncs the AOF and exits. Kill keeps Dir and its AOF,
// so Start brings the same data back.
type Server struct {
	URL  string // redis://127.0.0.1:PORT/0; the same after Kill and Start
	Port int
	Dir  string // temp dir holding the AOF and redis.log

	binary  string
	logPath string

	*servers.Lifecycle[int]
}

// Options configure Start.
type Options struct {
	Binary string // path to redis-server; empty: "redis-server" from PATH
}

// Start starts redis-server in a temp dir on a free loopback port and
// returns once it answers PING.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin, err := findRedis(opts.Binary)
	if err != nil {
		return nil, err
	}
	dir, err := servers.MakeDir(Dir)
	if err != nil {
		return nil, err
	}
	r := newServer(bin, dir)
	if err := r.First(ctx, nil); err != nil {
		return nil, err
	}
	r.Port = r.Ports()
	r.URL = fmt.Sprintf("redis://%s/0", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port)))
	return r, nil
}

func newServer(bin, dir string) *Server {
	r := &Server{Dir: dir, binary: bin, logPath: filepath.Join(dir, "redis.log")}
	r.Lifecycle = servers.NewLifecycle(servers.LifeSpec[int]{
		Name: "redis-server", Dir: dir, StopSignal: syscall.SIGTERM,
		FreePorts: servers.FreePort, Launch: r.launch,
	})
	return r
}

// launch starts redis-server on port and waits until it answers. Every
// write is appended to the AOF and fsynced before it is acknowledged (a
// product requirement); RDB snapshots are off so the AOF is the only
// persistence. stdout and stderr go to the log too: errors found before
// Redis opens --logfile (bad arguments) are printed there.
func (r *Server) launch(ctx context.Context, port int) (*servers.Child, error) {
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
	return servers.Launch{
		Name: "redis-server", LogPath: r.logPath,
		Command: func(out io.Writer) *exec.Cmd { return servers.NewCmd(r.binary, args, r.Dir, out, nil) },
		Probe:   func(ctx context.Context, c *servers.Child) error { return probe(ctx, addr, c.PID()) },
	}.Run(ctx, (*servers.Child).Kill)
}

// probe succeeds once the server at addr is ours (its INFO names pid)
// and answers PING (not LOADING). It dials itself so go-redis neither retries
// nor logs the refused connections expected while the server starts.
func probe(ctx context.Context, addr string, pid int) error {
	conn, stop, err := servers.DialProbe(ctx, addr)
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
	return servers.FindProgram(binary, "redis-server", "Redis server binary",
		`install the Debian package "redis-server" (apt-get install redis-server), or pass --redis URL (RUNNER_REDIS_URL) to use a running server`)
}
