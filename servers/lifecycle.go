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

// Lifecycle is the one life of every managed server: first start on free
// ports (again on new ones if another process wins a port), kill, halt,
// start again on the same ports, and stop or discard with the dir. Each
// server embeds one (NewLifecycle), configured with what is its own; the
// embedding gives every server the same PID, Stop, Discard, Kill, Halt and
// Start.
type Lifecycle[P any] struct {
	name       string         // in messages: "postgres", "redis-server", ...
	dir        string         // removed by Stop and Discard
	stopSignal syscall.Signal // asks the server to shut down cleanly
	freePorts  func() (P, error)
	// launch starts the server on ports and returns once it is ready. On
	// error nothing it started runs any more (Launch.run sees to that).
	launch func(ctx context.Context, ports P) (*Child, error)
	// kill SIGKILLs the server and all it started; nil: its process group
	// (child.kill). PostgreSQL's backends leave the group, for one.
	kill func(c *Child)
	// afterStop, if set, removes what a stopped server leaves outside its
	// process group: RabbitMQ's port programs.
	afterStop func()
	// release, if set, stops what outlives restarts of the server and goes
	// only with it: RabbitMQ's epmd.
	release func()

	mu    sync.Mutex
	proc  *Child // nil while the server is down
	ports P      // what the server last ran on; Start reuses them
	// ended: Stop or Discard ran, Start launches nothing any more. Set
	// under mu; read without it where mu is held already (a kill within
	// launchOn).
	ended atomic.Bool

	endOnce sync.Once
	endErr  error
}

// LifeSpec is what is a managed server's own in its Lifecycle.
type LifeSpec[P any] struct {
	Name       string         // in messages: "postgres", "redis-server", ...
	Dir        string         // the server's dir (MakeDir), removed by Stop and Discard
	StopSignal syscall.Signal // asks the server to shut down cleanly
	FreePorts  func() (P, error)
	// Launch starts the server on ports and returns once it is ready. On
	// error nothing it started runs any more (Launch.Run sees to that).
	Launch func(ctx context.Context, ports P) (*Child, error)
	// Kill SIGKILLs the server and all it started; nil: its process group
	// (Child.Kill).
	Kill func(c *Child)
	// AfterStop, if set, removes what a stopped server leaves outside its
	// process group; Release, if set, stops what outlives restarts of the
	// server and goes only with it.
	AfterStop, Release func()
}

// NewLifecycle is the life of the server s describes, not started yet
// (First starts it).
func NewLifecycle[P any](s LifeSpec[P]) *Lifecycle[P] {
	return &Lifecycle[P]{name: s.Name, dir: s.Dir, stopSignal: s.StopSignal, freePorts: s.FreePorts,
		launch: s.Launch, kill: s.Kill, afterStop: s.AfterStop, release: s.Release}
}

// First runs prepare (if any) and launches the server for the first time,
// on new ports if another process takes one of those picked first. If that
// fails it discards the server, dir and all.
func (l *Lifecycle[P]) First(ctx context.Context, prepare func() error) error {
	err := l.firstLaunch(ctx, prepare)
	if err != nil {
		return errors.Join(err, l.Discard(ctx))
	}
	return nil
}

func (l *Lifecycle[P]) firstLaunch(ctx context.Context, prepare func() error) error {
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
		if err == nil || attempt == bindAttempts || !LostPortRace(err) {
			return err
		}
	}
}

// launchOn launches the server on ports and records it as running.
func (l *Lifecycle[P]) launchOn(ctx context.Context, ports P) error {
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

// Ports are what the server runs on, or last ran on: Start reuses them.
func (l *Lifecycle[P]) Ports() P {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ports
}

// Runs reports whether c is the server's process now: a kill, halt or
// stop takes it out first, so its end then is no crash.
func (l *Lifecycle[P]) Runs(c *Child) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.proc == c
}

// isEnded reports whether Stop or Discard ran: nothing starts here again.
// It does not take mu: a kill runs with it held (launchOn).
func (l *Lifecycle[P]) isEnded() bool { return l.ended.Load() }

// PID is the process id of the server, 0 while it is down.
func (l *Lifecycle[P]) PID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proc == nil {
		return 0
	}
	return l.proc.PID()
}

// Start launches a killed or halted server again on the ports and dir it
// last ran with: clients reconnect to the same URL and find what the server
// had written (PostgreSQL first replays its WAL). It does nothing while the
// server runs.
func (l *Lifecycle[P]) Start(ctx context.Context) error {
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
func (l *Lifecycle[P]) Kill(ctx context.Context) error { return l.halt(ctx, 0) }

// Halt shuts the server down cleanly (or kills it after 10s); Start brings
// it back.
func (l *Lifecycle[P]) Halt(ctx context.Context) error { return l.halt(ctx, stopGrace) }

func (l *Lifecycle[P]) halt(ctx context.Context, grace time.Duration) error {
	if c := l.take(); c != nil {
		l.stopChild(ctx, c, grace)
	}
	return nil
}

// Stop shuts the server down cleanly and removes its dir. If it is not gone
// within 10s it is killed and Stop says so in its error; if ctx is done first
// it is killed quietly (the caller asked to hurry). Stop is idempotent;
// concurrent calls wait for the first and share its result.
func (l *Lifecycle[P]) Stop(ctx context.Context) error {
	l.endOnce.Do(func() { l.endErr = l.end(ctx, stopGrace) })
	return l.endErr
}

// Discard kills the server at once and removes its dir: for a caller that
// throws the data away, a clean shutdown (PostgreSQL's checkpoint) is
// wasted time. It shares Stop's once: whichever comes first wins.
func (l *Lifecycle[P]) Discard(ctx context.Context) error {
	l.endOnce.Do(func() { l.endErr = l.end(ctx, 0) })
	return l.endErr
}

// end stops the server (grace 0: kills it at once), releases what outlived
// its restarts and removes the dir.
func (l *Lifecycle[P]) end(ctx context.Context, grace time.Duration) error {
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
func (l *Lifecycle[P]) take() *Child {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.proc
	l.proc = nil
	return c
}

// stopChild asks c to shut down, waits up to grace (or until ctx is done)
// and then kills it. It reports whether the kill was needed, and returns
// with the process reaped.
func (l *Lifecycle[P]) stopChild(ctx context.Context, c *Child, grace time.Duration) (killed bool) {
	if !c.Exited() && !c.await(ctx, l.stopSignal, grace) {
		killed = true
		if l.kill != nil {
			l.kill(c)
		} else {
			c.Kill()
		}
	}
	if l.afterStop != nil {
		l.afterStop()
	}
	return killed
}

// Launch is one server process to start and wait for.
type Launch struct {
	Name    string    // the program, in messages: "postgres", "epmd"
	LogPath string    // its output is appended here
	Echo    io.Writer // also gets the output; nil: the log only
	Command func(out io.Writer) *exec.Cmd
	// Probe succeeds once the process c serves: the server on its port is
	// this one (not a stranger that won the port) and answers. nil: Ready
	// alone says so.
	Probe func(ctx context.Context, c *Child) error
	// Ready, if set, is a cheap check (no connection) that c is ready,
	// polled every readyPeek until it passes; only then is Probe tried. A
	// probe that fails is not free: a PostgreSQL still starting forks a
	// backend to refuse it, competing with the startup it waits for.
	Ready func(c *Child) error
	// ReadyDir, if set, holds what Ready reads: Ready is then checked on
	// each change of its files (dirWatch), and only every readyFallback
	// besides, not every readyPeek.
	ReadyDir string
	Timeout  time.Duration // for the process to become ready; 0: ReadyTimeout
}

// Run starts the process and waits until its probe succeeds. On failure it
// stops the process with kill, and the error quotes what it logged.
func (s Launch) Run(ctx context.Context, kill func(*Child)) (*Child, error) {
	f, out, err := openLog(s.LogPath, s.Echo)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", s.Name, err)
	}
	offset := LogSize(s.LogPath)
	w := readyWatch{peek: readyPeek}
	if s.Ready != nil && s.ReadyDir != "" {
		// Before the start: no change of the process's goes unseen.
		if dw, err := watchDir(s.ReadyDir); err == nil {
			defer dw.Close()
			w = readyWatch{peek: readyFallback, changed: dw.C}
		}
	}
	c, err := startChild(s.Name, s.Command(out), f)
	if err != nil {
		return nil, err
	}
	probe := func(context.Context) error { return nil }
	if s.Probe != nil {
		probe = func(ctx context.Context) error { return s.Probe(ctx, c) }
	}
	var ready func() error
	if s.Ready != nil {
		ready = func() error { return s.Ready(c) }
	}
	if err := waitReady(ctx, c, s.LogPath, offset, cmp.Or(s.Timeout, ReadyTimeout), ready, w, probe); err != nil {
		kill(c)
		return nil, err
	}
	return c, nil
}

// readyWatch is when waitReady checks ready again: every peek, and at
// once on a value from changed (nil: never).
type readyWatch struct {
	peek    time.Duration
	changed <-chan struct{}
}

// waitReady polls probe until it succeeds, the child exits, ctx is done or
// timeout passes; if ready is set, probe is tried only while ready passes
// (checked as w says). A probe in flight is cancelled when the child
// exits: a stranger that won the port may accept connections and never
// answer.
func waitReady(ctx context.Context, c *Child, logPath string, logOffset int64, timeout time.Duration, ready func() error, w readyWatch, probe func(context.Context) error) error {
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
	peeking := false // t times the next ready check (not a probe's)
	for {
		select {
		case <-ctx.Done():
		case <-w.changed:
			if peeking {
				t.Reset(0) // check now
			}
			continue
		case <-t.C:
			peeking = false
			if ready != nil {
				if last = ready(); last != nil {
					peeking = true
					t.Reset(w.peek)
					continue
				}
			}
			pctx, pcancel := context.WithTimeout(ctx, ProbeTimeout)
			last = probe(pctx)
			pcancel()
			if last == nil {
				return nil
			}
			t.Reset(ReadyPoll)
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
