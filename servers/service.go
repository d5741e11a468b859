package servers

import (
	"bytes"
	"context"
	"fmt"
	"os"
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
	Ready        string
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
// process group (so a kill takes what it forked), output captured for the
// failure trace, dead with the runner (Pdeathsig).
type Service struct {
	spec  ServiceSpec
	child *child
	out   *serviceOutput
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
	cmd := newCmd(spec.Argv[0], spec.Argv[1:], spec.Dir, out, nil)
	cmd.Env = append(os.Environ(), spec.Env...)
	c, err := startChild("service "+spec.Name, cmd, nil)
	if err != nil {
		return nil, err
	}
	s := &Service{spec: spec, child: c, out: out}
	if spec.Started != nil {
		spec.Started(s)
	}
	if err := s.awaitReady(ctx); err != nil {
		s.child.kill()
		return nil, err
	}
	return s, nil
}

func (s *Service) awaitReady(ctx context.Context) error {
	timeout := s.spec.ReadyTimeout
	if timeout <= 0 {
		timeout = readyTimeout
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.out.readyCh:
		return nil
	case <-s.child.done:
		return fmt.Errorf("service %s exited before it was ready (%v); its output:\n%s", s.spec.Name, s.child.err, s.Output())
	case <-t.C:
		return fmt.Errorf("service %s: no line containing %q on its output within %s; its output:\n%s", s.spec.Name, s.spec.Ready, timeout, s.Output())
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Name is the service's name in the system file.
func (s *Service) Name() string { return s.spec.Name }

// PID is the process id (also its process group id).
func (s *Service) PID() int { return s.child.pid() }

// Kill SIGKILLs the service's whole process group, as a crash would, and
// returns once it is reaped.
func (s *Service) Kill(context.Context) error {
	s.child.kill()
	return nil
}

// Stop sends SIGTERM to the group and waits up to grace for the service to
// exit, then kills what is left.
func (s *Service) Stop(ctx context.Context, grace time.Duration) error {
	if s.child.exited() {
		return nil
	}
	_ = syscall.Kill(-s.child.pid(), syscall.SIGTERM)
	if !s.child.await(ctx, syscall.SIGTERM, grace) {
		s.child.kill()
		return fmt.Errorf("service %s did not stop within %s of SIGTERM: killed", s.spec.Name, grace)
	}
	s.child.kill() // what it forked and left behind
	return nil
}

// Exited reports whether the service has exited, and how.
func (s *Service) Exited() (bool, error) {
	if !s.child.exited() {
		return false, nil
	}
	return true, s.child.err
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
