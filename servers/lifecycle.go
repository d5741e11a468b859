package servers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// lifecycle is the one life of every managed server: first start on free
// ports (again on new ones if another process wins a port), kill, halt,
// start again on the same ports, and stop or discard with the dir. Each
// server embeds one, configured with what is its own; the embedding gives
// every server the same PID, Stop, Discard, Kill, Halt and Start.
type lifecycle[P any] struct {
	name       string         // in messages: "postgres", "redis-server", ...
	dir        string         // removed by Stop and Discard
	stopSignal syscall.Signal // asks the server to shut down cleanly
	freePorts  func() (P, error)
	// launch starts the server on ports and returns once it is ready. On
	// error nothing it started runs any more (launchSpec.run sees to that).
	launch func(ctx context.Context, ports P) (*child, error)
	// kill SIGKILLs the server and all it started; nil: its process group
	// (child.kill). PostgreSQL's backends leave the group, for one.
	kill func(c *child)
	// afterStop, if set, removes what a stopped server leaves outside its
	// process group: RabbitMQ's port programs.
	afterStop func()
	// release, if set, stops what outlives restarts of the server and goes
	// only with it: RabbitMQ's epmd.
	release func()

	mu    sync.Mutex
	proc  *child // nil while the server is down
	ports P      // what the server last ran on; Start reuses them
	// ended: Stop or Discard ran, Start launches nothing any more. Set
	// under mu; read without it where mu is held already (a kill within
	// launchOn).
	ended atomic.Bool

	endOnce sync.Once
	endErr  error
}

// start runs prepare (if any) and launches the server for the first time,
// on new ports if another process takes one of those picked first. If that
// fails it discards the server, dir and all.
func (l *lifecycle[P]) start(ctx context.Context, prepare func() error) error {
	err := l.firstLaunch(ctx, prepare)
	if err != nil {
		return errors.Join(err, l.Discard(ctx))
	}
	return nil
}

func (l *lifecycle[P]) firstLaunch(ctx context.Context, prepare func() error) error {
	if prepare != nil {
		if err := prepare(); err != nil {
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		ports, err := l.freePorts()
		if err != nil {
			return err
		}
		err = l.launchOn(ctx, ports)
		if err == nil || attempt == bindAttempts || !lostPortRace(err) {
			return err
		}
	}
}

// launchOn launches the server on ports and records it as running.
func (l *lifecycle[P]) launchOn(ctx context.Context, ports P) error {
	c, err := l.launch(ctx, ports)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended.Load() { // a Stop raced this launch: it must not outlive the Stop
		l.stopChild(context.Background(), c, 0)
		return fmt.Errorf("%s: stopped while starting", l.name)
	}
	l.proc, l.ports = c, ports
	return nil
}

// isEnded reports whether Stop or Discard ran: nothing starts here again.
// It does not take mu: a kill runs with it held (launchOn).
func (l *lifecycle[P]) isEnded() bool { return l.ended.Load() }

// PID is the process id of the server, 0 while it is down.
func (l *lifecycle[P]) PID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proc == nil {
		return 0
	}
	return l.proc.pid()
}

// Start launches a killed or halted server again on the ports and dir it
// last ran with: clients reconnect to the same URL and find what the server
// had written (PostgreSQL first replays its WAL). It does nothing while the
// server runs.
func (l *lifecycle[P]) Start(ctx context.Context) error {
	l.mu.Lock()
	up, ended, ports := l.proc != nil, l.ended.Load(), l.ports
	l.mu.Unlock()
	if ended {
		return fmt.Errorf("%s: start after stop", l.name)
	}
	if up {
		return nil
	}
	return l.launchOn(ctx, ports)
}

// Kill SIGKILLs the server and everything it started, as a crash would. Its
// dir stays, so Start brings back what it had written.
func (l *lifecycle[P]) Kill(ctx context.Context) error { return l.halt(ctx, 0) }

// Halt shuts the server down cleanly (or kills it after 10s); Start brings
// it back.
func (l *lifecycle[P]) Halt(ctx context.Context) error { return l.halt(ctx, stopGrace) }

func (l *lifecycle[P]) halt(ctx context.Context, grace time.Duration) error {
	if c := l.take(); c != nil {
		l.stopChild(ctx, c, grace)
	}
	return nil
}

// Stop shuts the server down cleanly and removes its dir. If it is not gone
// within 10s it is killed and Stop says so in its error; if ctx is done first
// it is killed quietly (the caller asked to hurry). Stop is idempotent;
// concurrent calls wait for the first and share its result.
func (l *lifecycle[P]) Stop(ctx context.Context) error {
	l.endOnce.Do(func() { l.endErr = l.end(ctx, stopGrace) })
	return l.endErr
}

// Discard kills the server at once and removes its dir: for a caller that
// throws the data away, a clean shutdown (PostgreSQL's checkpoint) is
// wasted time. It shares Stop's once: whichever comes first wins.
func (l *lifecycle[P]) Discard(ctx context.Context) error {
	l.endOnce.Do(func() { l.endErr = l.end(ctx, 0) })
	return l.endErr
}

// end stops the server (grace 0: kills it at once), releases what outlived
// its restarts and removes the dir.
func (l *lifecycle[P]) end(ctx context.Context, grace time.Duration) error {
	l.mu.Lock()
	l.ended.Store(true)
	l.mu.Unlock()
	var errs []error
	if c := l.take(); c != nil && l.stopChild(ctx, c, grace) && grace > 0 && ctx.Err() == nil {
		errs = append(errs, fmt.Errorf("%s did not shut down within %v; killed it", l.name, grace))
	}
	if l.release != nil {
		l.release()
	}
	if err := os.RemoveAll(l.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s dir: %w", l.name, err))
	} else {
		dropDir(l.dir) // the dir is gone: its lease may go too
	}
	return errors.Join(errs...)
}

// take swaps the running child out (nil if none): the caller stops it.
func (l *lifecycle[P]) take() *child {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.proc
	l.proc = nil
	return c
}

// stopChild asks c to shut down, waits up to grace (or until ctx is done)
// and then kills it. It reports whether the kill was needed, and returns
// with the process reaped.
func (l *lifecycle[P]) stopChild(ctx context.Context, c *child, grace time.Duration) (killed bool) {
	if !c.exited() && !c.await(ctx, l.stopSignal, grace) {
		killed = true
		if l.kill != nil {
			l.kill(c)
		} else {
			c.kill()
		}
	}
	if l.afterStop != nil {
		l.afterStop()
	}
	return killed
}

// launchSpec is one server process to start and wait for.
type launchSpec struct {
	name    string    // the program, in messages: "postgres", "epmd"
	logPath string    // its output is appended here
	echo    io.Writer // also gets the output; nil: the log only
	command func(out io.Writer) *exec.Cmd
	// probe succeeds once the process c serves: the server on its port is
	// this one (not a stranger that won the port) and answers. nil: ready
	// alone says so.
	probe func(ctx context.Context, c *child) error
	// ready, if set, is a cheap check (no connection) that c is ready,
	// polled every readyPeek until it passes; only then is probe tried. A
	// probe that fails is not free: a PostgreSQL still starting forks a
	// backend to refuse it, competing with the startup it waits for.
	ready   func(c *child) error
	timeout time.Duration // for the process to become ready; 0: readyTimeout
}

// run starts the process and waits until its probe succeeds. On failure it
// stops the process with kill, and the error quotes what it logged.
func (s launchSpec) run(ctx context.Context, kill func(*child)) (*child, error) {
	f, out, err := openLog(s.logPath, s.echo)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", s.name, err)
	}
	offset := logSize(s.logPath)
	c, err := startChild(s.name, s.command(out), f)
	if err != nil {
		return nil, err
	}
	probe := func(context.Context) error { return nil }
	if s.probe != nil {
		probe = func(ctx context.Context) error { return s.probe(ctx, c) }
	}
	var ready func() error
	if s.ready != nil {
		ready = func() error { return s.ready(c) }
	}
	if err := waitReady(ctx, c, s.logPath, offset, cmp.Or(s.timeout, readyTimeout), ready, probe); err != nil {
		kill(c)
		return nil, err
	}
	return c, nil
}

// waitReady polls probe until it succeeds, the child exits, ctx is done or
// timeout passes; if ready is set, probe is tried only while ready passes. A
// probe in flight is cancelled when the child exits: a stranger that won the
// port may accept connections and never answer.
func waitReady(ctx context.Context, c *child, logPath string, logOffset int64, timeout time.Duration, ready func() error, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
		case <-t.C:
			if ready != nil {
				if last = ready(); last != nil {
					t.Reset(readyPeek)
					continue
				}
			}
			pctx, pcancel := context.WithTimeout(ctx, probeTimeout)
			last = probe(pctx)
			pcancel()
			if last == nil {
				return nil
			}
			t.Reset(readyPoll)
			continue
		}
		select {
		case <-c.done:
			return &startError{what: c.name + " exited while starting", logPath: logPath, exit: c.err, output: logSince(logPath, logOffset)}
		default:
			return fmt.Errorf("%s did not accept connections (%w); last probe error: %v", c.name, context.Cause(ctx), last)
		}
	}
}
