package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxdrill/runner/internal/redact"
)

// ServiceSpec is how to run one process of a team's system.
type ServiceSpec struct {
	Name string
	Argv []string // argv[0] is looked up on PATH unless it holds a "/"
	Dir  string   // working directory
	Env  []string // KEY=value added to the runner's environment
	// Ready is text that, on a line of stdout or stderr, means the service
	// is ready; "" means ready once started.
	Ready string
	// ReadyOn, when set, is a further condition of readiness seen outside
	// the service's output (sysrun's: a crossing its proxies counted);
	// with Ready, both must have happened. ReadyTimeout bounds them both.
	ReadyOn      Await
	ReadyTimeout time.Duration // 0: 30 s
	// Secrets are hidden from Output wherever they appear, in every
	// encoding (the passwords and tokens of the URLs in Env, plain; see
	// redact.Set, which also hides any password by its place).
	Secrets []string
	// Started, when set, gets the service as soon as its process runs,
	// before it is ready: a fault may strike while it starts up.
	Started func(*Service)
}

// Service is a running process of a team's system, supervised: its own
// session and process group, and a token in its environment that all it
// starts inherits, so a kill takes every descendant (see tree.go); output
// captured for the failure trace; dead with the runner (Pdeathsig), and
// what it started found by `clean` from the run's lease if the runner was
// SIGKILLed.
type Service struct {
	spec    ServiceSpec
	child   *Child
	out     *serviceOutput
	tree    tree   // the process and all it started
	lease   *lease // recorded in; held until the service is ended
	endOnce sync.Once

	seenMu sync.Mutex
	seen   map[int]procInfo // its processes seen by Stop: reaped at the end
}

// serviceLog bounds what Output keeps: the latest bytes are what a failure
// trace needs. Cutting the oldest, the rest of the line cut goes too, or
// up to a blank within maxCutLine, else maxCutLine more bytes (a word
// that long is no password).
const (
	serviceLog = 64 << 10
	maxCutLine = 4 << 10
)

// StartService starts spec and returns once it is ready. A service that
// exits or stays silent past the timeout is an error quoting its output.
func StartService(ctx context.Context, spec ServiceSpec) (*Service, error) {
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("service %s: nothing to run", spec.Name)
	}
	out := &serviceOutput{ready: spec.Ready, readyCh: make(chan struct{})}
	if spec.Ready == "" {
		close(out.readyCh)
	}
	// Orphaned descendants re-parent to the runner, which reaps them.
	becomeSubreaper()
	l, err := holdLease(TempRoot())
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", spec.Name, err)
	}
	token := l.token()
	cmd := NewCmd(spec.Argv[0], spec.Argv[1:], spec.Dir, out, nil)
	cmd.Env = withOwner(append(os.Environ(), spec.Env...), token)
	// A session of its own (and so a process group): a descendant that
	// moves to another process group stays in the session.
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Setsid = false, true
	c, err := startChild("service "+spec.Name, cmd, nil)
	if err != nil {
		l.release()
		return nil, err
	}
	s := &Service{spec: spec, child: c, out: out, lease: l, tree: tree{leader: c.PID(), token: token}}
	if p, ok := readProc(c.PID()); ok {
		s.tree.start = p.start
	}
	l.record(serviceRecord{Service: spec.Name, Token: token, PID: c.PID(), PGID: c.PID(), Session: c.PID(), Start: s.tree.start})
	if spec.Started != nil {
		spec.Started(s)
	}
	if err := s.awaitReady(ctx); err != nil {
		s.killAll()
		return nil, err
	}
	return s, nil
}

// killAll SIGKILLs the service's process and every descendant, reaps them
// (the orphans re-parented to the runner too) and releases the lease.
func (s *Service) killAll() {
	// All at once, the process too, while it still holds its group and
	// session together.
	// (killTrees also reaps its group's and session's orphans that died
	// before: zombies now.)
	s.seenMu.Lock()
	killed := killTrees([]tree{s.tree}, stopGrace, s.seen)
	s.seenMu.Unlock()
	if !s.child.Exited() && s.tree.start == "" {
		s.child.Kill() // not known to killTrees: its group, and reaped
	} else if !s.child.Exited() {
		pids := map[int]bool{s.tree.leader: true}
		for _, p := range killed {
			pids[p.pid] = true
		}
		s.child.reapKilled(pids)
	}
	s.endOnce.Do(s.lease.release)
}

func (s *Service) awaitReady(ctx context.Context) error {
	timeout := s.spec.ReadyTimeout
	if timeout <= 0 {
		timeout = ReadyTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	// Each is nil once it happened: a nil channel is never ready.
	line, on := s.out.readyCh, (<-chan struct{})(nil)
	if s.spec.ReadyOn != nil {
		on = s.spec.ReadyOn.Met()
	}
	for line != nil || on != nil {
		select {
		case <-line:
			line = nil
		case <-on:
			if err := s.readyOnErr(); err != nil {
				return err
			}
			on = nil
		case <-s.child.done:
			// What made it ready may have come before the exit, and
			// select picks among the cases ready at random: a service
			// with no ready condition that exits at once (a wrapper that
			// leaves a daemon) was now ready, now not.
			if closed(line) && closed(on) {
				if on != nil {
					return s.readyOnErr()
				}
				return nil
			}
			return fmt.Errorf("service %s exited before it was ready (%v); its output:\n%s", s.spec.Name, s.child.err, s.Output())
		case <-t.C:
			return s.notReady(timeout, line != nil, on != nil)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// readyOnErr is the error of a ready crossing that can never be counted.
func (s *Service) readyOnErr() error {
	if err := s.spec.ReadyOn.Err(); err != nil {
		return fmt.Errorf("service %s: ready: its %s can never be counted: %v; its output:\n%s", s.spec.Name, s.spec.ReadyOn.What(), err, s.Output())
	}
	return nil
}

// closed reports whether ch is nil or closed (without waiting).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return ch == nil
	}
}

// notReady is the error of a service not ready within timeout: what did
// not happen (the line, the crossing), each with what happened instead.
func (s *Service) notReady(timeout time.Duration, line, on bool) error {
	var missing []string
	if line {
		missing = append(missing, fmt.Sprintf("no line containing %q on its output", s.spec.Ready))
	}
	if on {
		missing = append(missing, fmt.Sprintf("no %s (%s)", s.spec.ReadyOn.What(), s.spec.ReadyOn.Instead()))
	}
	return fmt.Errorf("service %s: %s within %s; its output:\n%s", s.spec.Name, strings.Join(missing, " and "), timeout, s.Output())
}

// Await is a condition of a service's readiness that the runner sees
// outside its output.
type Await interface {
	// Met is closed once the condition holds, or once it never can (Err
	// says why).
	Met() <-chan struct{}
	Err() error
	// What is what is awaited, as the errors say it: "crossing of
	// broker.request(XREADGROUP) through its proxies".
	What() string
	// Instead is what happened instead, for the timeout's error: "its
	// proxies saw: broker.XADD→ok ×2".
	Instead() string
}

// Name is the service's name in the system file.
func (s *Service) Name() string { return s.spec.Name }

// PID is the process id (also its process group and session id).
func (s *Service) PID() int { return s.child.PID() }

// Kill SIGKILLs the service's process and every descendant (whatever
// process group or session it moved to), as a crash would, and returns once
// they are reaped. Also for a service that exited by itself: what it left
// running goes.
func (s *Service) Kill(context.Context) error {
	s.killAll()
	return nil
}

// ErrKilledAfterGrace is Stop's error when the service's own process
// outlived the grace and was SIGKILLed.
var ErrKilledAfterGrace = errors.New("killed")

// Stop sends SIGTERM to the service's process and every descendant and
// waits up to grace for them to exit, then kills what is left. Only the
// service's own process outliving the grace is an error.
func (s *Service) Stop(ctx context.Context, grace time.Duration) error {
	defer s.killAll() // what it forked and left behind
	live := s.live()
	if len(live) == 0 {
		return nil
	}
	for _, p := range live {
		sendSignal(p, syscall.SIGTERM)
	}
	// The process, then its descendants, get the grace to finish. (Its
	// exit shows in /proc at once; Wait also waits for the output pipe,
	// which a descendant may hold.)
	t := time.NewTimer(grace)
	defer t.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !s.exitedNow() || len(s.live()) > 0 {
		select {
		case <-tick.C:
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		break
	}
	if !s.exitedNow() {
		s.killAll()
		return fmt.Errorf("service %s did not stop within %s of SIGTERM: %w", s.spec.Name, grace, ErrKilledAfterGrace)
	}
	return nil
}

// exitedNow reports whether the service's own process has exited (its
// descendants may still hold its output open).
func (s *Service) exitedNow() bool {
	if s.child.Exited() {
		return true
	}
	p, ok := readProc(s.tree.leader)
	return !ok || p.start != s.tree.start || !p.alive()
}

// live are the service's live processes (seen, for the reaping at the end).
func (s *Service) live() map[int]procInfo {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	if s.seen == nil {
		s.seen = map[int]procInfo{}
	}
	return liveMembers([]tree{s.tree}, s.seen)
}

// Exited reports whether the service has exited, and how.
func (s *Service) Exited() (bool, error) {
	if !s.child.Exited() {
		return false, nil
	}
	return true, s.child.err
}

// ExitedAt is when the service's process exited (reaped); zero while it
// runs.
func (s *Service) ExitedAt() time.Time {
	if !s.child.Exited() {
		return time.Time{}
	}
	return s.child.exitAt
}

// Output is the latest of what the service wrote, secrets hidden
// (redact.Set: every encoding of spec.Secrets, and any password by its
// place in a URL, password=… or JSON).
func (s *Service) Output() string {
	return redact.NewSet(s.spec.Secrets...).Text(s.out.String())
}

// serviceOutput keeps the latest output and closes readyCh at the first
// line containing ready.
type serviceOutput struct {
	mu      sync.Mutex
	buf     []byte
	line    []byte // the unfinished last line, for the ready match
	ready   string
	readyCh chan struct{}
	seen    bool
}

func (o *serviceOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if over := len(o.buf) - serviceLog; over > 0 {
		// Cut at a line's start, else at a blank: a secret cut in two
		// would no longer be recognised, and half of it would show.
		rest := o.buf[over:min(len(o.buf), over+maxCutLine)]
		if nl := bytes.IndexByte(rest, '\n'); nl >= 0 {
			over += nl + 1
		} else if sp := bytes.IndexAny(rest, " \t"); sp >= 0 {
			over += sp + 1
		} else {
			over += len(rest)
		}
		o.buf = append(o.buf[:0], o.buf[over:]...)
	}
	if o.ready != "" && !o.seen {
		o.line = append(o.line, p...)
		for {
			i := bytes.IndexByte(o.line, '\n')
			if i < 0 {
				break
			}
			if bytes.Contains(o.line[:i], []byte(o.ready)) {
				o.seen = true
				close(o.readyCh)
				break
			}
			o.line = o.line[i+1:]
		}
		if len(o.line) > serviceLog { // a line that never ends
			o.line = o.line[len(o.line)-len(o.ready):]
		}
	}
	return len(p), nil
}

func (o *serviceOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return string(o.buf)
}
