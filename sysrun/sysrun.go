// Package sysrun runs a team's system for one scenario: each service its own
// process group, behind proxies of its own (one per link: producer_db,
// consumer_db, broker), so that a fault is attributed to exactly one
// service's connection and strikes at an exact protocol boundary.
package sysrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/pgwire"
	"github.com/outboxdrill/runner/proxy/resp"
	"github.com/outboxdrill/runner/servers"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// StopGrace is how long stop waits after SIGTERM before SIGKILL.
const StopGrace = 5 * time.Second

// Config is what one scenario's system runs against.
type Config struct {
	System *system.System
	// ProducerURL and ConsumerURL are the scenario's own databases, direct;
	// the services get proxy addresses instead.
	ProducerURL, ConsumerURL string
	// BrokerURL is the broker, direct; BrokerName says which (only Redis
	// has a protocol proxy: elsewhere the services get BrokerURL itself and
	// a broker fault skips the scenario).
	BrokerURL, BrokerName string
	// Vars are the scenario's ${…} values: stream, consumer and its vars.
	Vars map[string]string
}

// Run is the system running for one scenario. It implements steps.Services.
type Run struct {
	cfg    Config
	mu     sync.Mutex
	svcs   map[string]*service
	procs  map[string]*servers.Service // the last process of each name, for its output
	faults []*armed
	logs   []brokerLog // every broker proxy of the run, for the history
	starts int
}

type service struct {
	name  string
	mu    sync.Mutex
	proc  *servers.Service // set as soon as the process runs
	pg    [2]*pgwire.Proxy
	redis *resp.Proxy
}

// armed is a fault a start step armed, to judge at the end.
type armed struct {
	service string
	f       system.Fault
	a       interface {
		Done() <-chan struct{}
		Fired() bool
		Err() error
	}
}

var _ steps.Services = (*Run)(nil)

// New prepares a system run; nothing starts before a start step.
func New(cfg Config) *Run {
	return &Run{cfg: cfg, svcs: map[string]*service{}, procs: map[string]*servers.Service{}}
}

// Start starts a service behind new proxies, arms f on them, and waits for
// the service to be ready.
func (r *Run) Start(ctx context.Context, name string, env map[string]string, f *system.Fault) (string, error) {
	spec, ok := r.cfg.System.Services[name]
	if !ok {
		return "", fmt.Errorf("no service %q in %s; services: %s", name, r.cfg.System.File, strings.Join(r.cfg.System.Names(), ", "))
	}
	if err := r.gone(ctx, name); err != nil {
		return "", err
	}
	s := &service{name: name}
	vars, secrets, err := r.proxies(s)
	if err != nil {
		s.close()
		return "", err
	}
	if f != nil {
		if err := r.arm(name, s, *f); err != nil {
			s.close()
			return "", err
		}
	}
	envList, err := r.environment(spec, env, vars)
	if err != nil {
		s.close()
		return "", err
	}
	argv := make([]string, len(spec.Run))
	for i, a := range spec.Run {
		if argv[i], err = system.Expand(a, vars); err != nil {
			s.close()
			return "", fmt.Errorf("run: %v", err)
		}
	}
	proc, err := servers.StartService(ctx, servers.ServiceSpec{Name: name, Argv: argv, Dir: r.cfg.System.Dir, Env: envList, Ready: spec.Ready, ReadyTimeout: spec.ReadyTimeout, Secrets: secrets,
		Started: func(p *servers.Service) { s.mu.Lock(); s.proc = p; s.mu.Unlock() }})
	if err != nil {
		s.close()
		return "", err
	}
	r.mu.Lock()
	r.svcs[name] = s
	r.procs[name] = proc
	r.mu.Unlock()
	detail := fmt.Sprintf("started %s (pid %d); producer_db via %s, consumer_db via %s, broker via %s", name, proc.PID(), s.pg[0].Addr(), s.pg[1].Addr(), r.brokerVia(s))
	if f != nil {
		detail += "; armed " + f.Text
	}
	return detail, nil
}

// gone makes sure no process of the service runs: one a fault killed (or
// that exited) is let go with its proxies; a live one is an error.
func (r *Run) gone(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A fault that struck may still be killing the service: the state a
	// scenario checks (the entry in the stream) can show before the kill
	// is done. Wait for it.
	for _, a := range r.faults {
		if a.service == name && a.a.Fired() {
			select {
			case <-a.a.Done():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	s, ok := r.svcs[name]
	if !ok {
		return nil
	}
	if exited, _ := s.proc.Exited(); !exited {
		for _, a := range r.faults {
			if a.service == name && !a.a.Fired() {
				return fmt.Errorf("service %s is running already: its fault %s has not fired yet (wait for what it leaves behind with expect's within:, or stop or kill it first)", name, a.f.Text)
			}
		}
		return fmt.Errorf("service %s is running already: stop or kill it first", name)
	}
	delete(r.svcs, name)
	s.close()
	return nil
}

func (r *Run) brokerVia(s *service) string {
	if s.redis != nil {
		return s.redis.Addr()
	}
	return r.cfg.BrokerName + " directly (no protocol proxy for it yet)"
}

// proxies starts the service's proxies and returns the ${…} that name them
// and the secrets its output must hide.
func (r *Run) proxies(s *service) (map[string]string, []string, error) {
	vars := maps.Clone(r.cfg.Vars)
	var secrets []string
	for i, link := range []struct{ name, url string }{{"producer_db", r.cfg.ProducerURL}, {"consumer_db", r.cfg.ConsumerURL}} {
		u, err := url.Parse(link.url)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not a URL", link.name)
		}
		if s.pg[i], err = pgwire.Listen(u.Host); err != nil {
			return nil, nil, err
		}
		vars[link.name+".url"] = via(u, s.pg[i].Addr(), "sslmode", "disable")
		if p, ok := u.User.Password(); ok {
			secrets = append(secrets, p)
		}
	}
	u, err := url.Parse(r.cfg.BrokerURL)
	if err != nil {
		return nil, nil, errors.New("broker: not a URL")
	}
	if p, ok := u.User.Password(); ok {
		secrets = append(secrets, p)
	}
	vars["broker.url"] = r.cfg.BrokerURL
	if r.cfg.BrokerName == "redis" {
		if s.redis, err = resp.Listen(u.Host); err != nil {
			return nil, nil, err
		}
		r.mu.Lock()
		r.starts++
		r.logs = append(r.logs, brokerLog{service: s.name, start: r.starts, proxy: s.redis})
		r.mu.Unlock()
		vars["broker.url"] = via(u, s.redis.Addr(), "", "")
	}
	return vars, secrets, nil
}

// via is u pointed at addr, with query key=value set when key is given.
func via(u *url.URL, addr, key, value string) string {
	v := *u
	v.Host = addr
	if key != "" {
		q := v.Query()
		q.Set(key, value)
		v.RawQuery = q.Encode()
	}
	return v.String()
}

// environment is the service's env: the system file's, then the step's,
// each ${…} expanded.
func (r *Run) environment(spec *system.Service, extra, vars map[string]string) ([]string, error) {
	all := maps.Clone(spec.Env)
	if all == nil {
		all = map[string]string{}
	}
	// The step's env is also there for the system file's ${…}: a system
	// file can leave a value to each start (GROUP: "${group}").
	vars = maps.Clone(vars)
	for k, v := range extra {
		ev, err := system.Expand(v, vars)
		if err != nil {
			return nil, fmt.Errorf("env %s: %v", k, err)
		}
		all[k], vars[k] = ev, ev
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if _, fromStep := extra[k]; fromStep {
			out = append(out, k+"="+all[k])
			continue
		}
		v, err := system.Expand(all[k], vars)
		if err != nil {
			return nil, fmt.Errorf("env %s: %v", k, err)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// arm puts the fault on the service's proxy for its link.
func (r *Run) arm(name string, s *service, f system.Fault) error {
	kill := func() error {
		s.mu.Lock()
		proc := s.proc
		s.mu.Unlock()
		if proc == nil {
			return errors.New("the service had not started")
		}
		return proc.Kill(context.Background())
	}
	act := fault.Action{Do: doOf(f.Action.Do), Delay: f.Action.Delay, Kill: kill}
	var a *armed
	switch f.Trigger.Link {
	case "producer_db", "consumer_db":
		b := pgwire.Commit
		if f.Trigger.Boundary == "statement" {
			b = pgwire.Statement
		}
		i := 0
		if f.Trigger.Link == "consumer_db" {
			i = 1
		}
		x, err := s.pg[i].Arm(pgwire.Trigger{Boundary: b, Table: f.Trigger.Filter, Nth: f.Nth, Action: act})
		if err != nil {
			return err
		}
		a = &armed{service: name, f: f, a: x}
	case "broker":
		if s.redis == nil {
			return &steps.SkipError{Reason: fmt.Sprintf("%s needs a %s protocol proxy; the runner has one for Redis only (NATS, RabbitMQ and Kafka proxies are later work)", f.Trigger, r.cfg.BrokerName)}
		}
		b := resp.Reply
		if f.Trigger.Boundary == "request" {
			b = resp.Request
		}
		x, err := s.redis.Arm(resp.Trigger{Boundary: b, Command: f.Trigger.Filter, Nth: f.Nth, Action: act})
		if err != nil {
			return err
		}
		a = &armed{service: name, f: f, a: x}
	default:
		return fmt.Errorf("unknown link %q", f.Trigger.Link)
	}
	r.mu.Lock()
	r.faults = append(r.faults, a)
	r.mu.Unlock()
	return nil
}

func doOf(do string) fault.Do {
	switch do {
	case "kill":
		return fault.Kill
	case "cut":
		return fault.Cut
	case "error":
		return fault.Error
	}
	return fault.Delay
}

// Stop stops a service: SIGTERM, SIGKILL after StopGrace.
func (r *Run) Stop(ctx context.Context, name string) error {
	s, err := r.take(name)
	if err != nil {
		return err
	}
	defer s.close()
	return s.proc.Stop(ctx, StopGrace)
}

// Kill SIGKILLs a service's process group.
func (r *Run) Kill(ctx context.Context, name string) error {
	s, err := r.take(name)
	if err != nil {
		return err
	}
	defer s.close()
	return s.proc.Kill(ctx)
}

// take removes a running service from the run.
func (r *Run) take(name string) (*service, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.svcs[name]
	if !ok {
		if _, known := r.cfg.System.Services[name]; !known {
			return nil, fmt.Errorf("no service %q in %s; services: %s", name, r.cfg.System.File, strings.Join(r.cfg.System.Names(), ", "))
		}
		return nil, fmt.Errorf("service %s is not running", name)
	}
	delete(r.svcs, name)
	return s, nil
}

func (s *service) close() {
	for _, p := range s.pg {
		if p != nil {
			p.Close()
		}
	}
	if s.redis != nil {
		s.redis.Close()
	}
}

// Unstruck judges the armed faults: an error for one that never struck, a
// skip for one that could not be classified exactly.
func (r *Run) Unstruck() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, a := range r.faults {
		var u *fault.Unclassifiable
		select {
		case <-a.a.Done():
		default:
			errs = append(errs, fmt.Errorf("the fault %s on %s never fired", a.f.Text, a.service))
			continue
		}
		if err := a.a.Err(); errors.As(err, &u) {
			return &steps.SkipError{Reason: fmt.Sprintf("the fault %s on %s: %v", a.f.Text, a.service, err)}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("the fault %s on %s: %w", a.f.Text, a.service, err))
		}
	}
	return errors.Join(errs...)
}

// Outputs are the services' captured output (secrets hidden), for a
// failure's trace.
func (r *Run) Outputs() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for n, p := range r.procs {
		out[n] = p.Output()
	}
	return out
}

// Close kills every service still running and closes its proxies.
func (r *Run) Close(ctx context.Context) error {
	r.mu.Lock()
	svcs := r.svcs
	r.svcs = map[string]*service{}
	r.mu.Unlock()
	var errs []error
	for _, s := range svcs {
		errs = append(errs, s.proc.Kill(ctx))
		s.close()
	}
	return errors.Join(errs...)
}
