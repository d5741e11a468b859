package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a throwaway Redis server owned by this process.
type Redis struct {
	URL  string // redis://127.0.0.1:PORT/0
	Port int
	Dir  string // temp dir holding the AOF and redis.log

	binary  string
	logPath string

	process
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
	dir, err := os.MkdirTemp("", "drill-redis-*")
	if err != nil {
		return nil, fmt.Errorf("redis temp dir: %w", err)
	}
	r := &Redis{Dir: dir, binary: bin, logPath: filepath.Join(dir, "redis.log")}
	if err := r.start(ctx); err != nil {
		r.shutdown(ctx, 0)
		return nil, err
	}
	return r, nil
}

// PID is the process id of redis-server.
func (r *Redis) PID() int { return r.pid() }

// Stop sends SIGTERM (Redis fsyncs the AOF and exits) and removes Dir. If
// the server is not gone within 10s it is SIGKILLed and Stop says so in its
// error; if ctx is done first it is SIGKILLed quietly. Stop is idempotent;
// concurrent calls wait for the first and share its result.
func (r *Redis) Stop(ctx context.Context) error {
	return r.once(func() error { return r.shutdown(ctx, stopGrace) })
}

// Discard kills the server at once and removes Dir (see Postgres.Discard).
func (r *Redis) Discard(ctx context.Context) error {
	return r.once(func() error { return r.shutdown(ctx, 0) })
}

// Kill SIGKILLs the server, as a crash would; Dir and its AOF stay, so
// Start brings the same data back.
func (r *Redis) Kill(ctx context.Context) error { return r.halt(ctx, 0) }

// Halt stops the server cleanly (SIGTERM: it fsyncs the AOF and exits);
// Start brings it back.
func (r *Redis) Halt(ctx context.Context) error { return r.halt(ctx, stopGrace) }

func (r *Redis) halt(ctx context.Context, grace time.Duration) error {
	if c := r.take(); c != nil {
		c.stop(ctx, syscall.SIGTERM, grace)
	}
	return nil
}

// Start relaunches a killed or halted server on the same port and dir, so
// clients reconnect to the same URL and find the data its AOF kept.
func (r *Redis) Start(ctx context.Context) error {
	return relaunch(ctx, &r.process, &r.Port, r.launch)
}

// shutdown stops the server (grace 0: kill at once) and removes Dir.
func (r *Redis) shutdown(ctx context.Context, grace time.Duration) error {
	var errs []error
	if c := r.current(); c != nil && c.stop(ctx, syscall.SIGTERM, grace) && grace > 0 && ctx.Err() == nil {
		errs = append(errs, fmt.Errorf("redis did not shut down within %v; killed it", grace))
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove redis dir: %w", err))
	}
	return errors.Join(errs...)
}

// start launches the server, on a new port if another process takes the one
// picked first.
func (r *Redis) start(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		err = r.launch(ctx, port)
		if err == nil || attempt == bindAttempts || !lostPortRace(err) {
			return err
		}
	}
}

// command builds the redis-server command for port. Every write is appended
// to the AOF and fsynced before it is acknowledged (a product requirement);
// RDB snapshots are off so the AOF is the only persistence.
func (r *Redis) command(port int, out *os.File) *exec.Cmd {
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
	return newCmd(r.binary, args, r.Dir, out, nil)
}

// launch starts redis-server on port and waits until it answers. On failure
// the process is gone when launch returns.
func (r *Redis) launch(ctx context.Context, port int) error {
	// stdout and stderr go to the log too: errors found before Redis opens
	// --logfile (bad arguments) are printed there.
	f, _, err := openLog(r.logPath, nil)
	if err != nil {
		return fmt.Errorf("redis log: %w", err)
	}
	offset := logSize(r.logPath)
	c, err := startChild("redis-server", r.command(port, f), f)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	probe := func(ctx context.Context) error { return probeRedis(ctx, addr, c.pid()) }
	if err := waitReady(ctx, c, r.logPath, offset, probe); err != nil {
		c.stop(ctx, syscall.SIGKILL, 0)
		return err
	}
	r.set(c, func() { r.Port, r.URL = port, fmt.Sprintf("redis://%s/0", addr) })
	return nil
}

// probeRedis succeeds once the server at addr is ours (its INFO names pid)
// and answers PING (not LOADING). It dials itself so go-redis neither retries
// nor logs the refused connections expected while the server starts.
func probeRedis(ctx context.Context, addr string, pid int) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close() // in case the client never takes it
	// go-redis honours deadlines but not cancellation; waitReady cancels a
	// probe when the server exits, so hang up then.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
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
	if binary == "" {
		binary = "redis-server"
	}
	path, err := exec.LookPath(binary)
	if err == nil {
		return path, nil
	}
	searched := []string{"PATH"}
	if strings.ContainsRune(binary, filepath.Separator) {
		searched = []string{binary}
	}
	return "", &MissingBinaryError{
		Binary:   binary,
		Searched: searched,
		Hint:     `install the Debian package "redis-server" (apt-get install redis-server), or pass --redis URL (RUNNER_REDIS_URL) to use a running server`,
		what:     "Redis server binary (" + filepath.Base(binary) + ")",
	}
}
