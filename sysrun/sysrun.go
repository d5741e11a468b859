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
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/listen"
	"github.com/outboxdrill/runner/proxy/pgwire"
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
	// BrokerURL is the broker, direct; BrokerName says which: its Kind's
	// protocol proxy stands between each service and it (a Kind without
	// one: the services get BrokerURL itself and a broker fault skips the
	// scenario).
	BrokerURL, BrokerName string
	// Vars are the scenario's ${…} values: stream, consumer and its vars.
	Vars map[string]string
	// PGSlots cap the connections the services open to the producer's and
	// the consumer's server, shared by every proxy on it (nil: each
	// proxy's own cap alone).
	PGSlots [2]*listen.Slots
}

// Run is the system running for one scenario. It implements steps.Services.
type Run struct {
	cfg    Config
	mu     sync.Mutex
	svcs   map[string]*service
	insts  []*instance // every process a start step started, in start order
	faults []*armed
	logs   []brokerLog // every broker proxy of the run, for the history
	starts int

	observing  bool        // Observe: new processes record what they wrote
	observed   []*observed // every process's proxies, for Crossings
	supervised map[string]*supervisor
	gaveUp     map[string]int // services whose supervisor gave up, with the restarts in a row it tried
	hideOnce   sync.Once
	hide       *redact.Set // the run's secrets, for what its servers said
	following  []*armed    // what fault steps armed: moved to the next process until it strikes
	supWG      sync.WaitGroup
	closed     bool // Close began: no supervisor restarts anything
}

type service struct {
	name   string
	mu     sync.Mutex
	proc   *servers.Service // set as soon as the process runs
	since  time.Time        // when proc began to run
	inst   *instance
	pg     [2]*pgwire.Proxy
	broker broker.Proxy // nil: the broker has no protocol proxy
	// given says which proxies the service was told about (its env or
	// argv names their address): a pool that connects lazily still uses
	// the link before its first connection.
	given [3]bool // producer_db, consumer_db, broker
}

// instance is one process of a service, as its start step started it: what
// it said and how it ended stay readable after it is gone.
type instance struct {
	service string
	at      diag.Pos       // the start step
	fault   *fault.Trigger // armed with this start, nil for none
	mu      sync.Mutex
	proc    *servers.Service // nil until the process runs
	ended   string           // how the runner ended it; "" while it runs or when it exited by itself
	endedAt time.Time        // when the runner began to end it
	start   int              // the run's service start it is (brokerLog's), 0 without a broker proxy
}

// end records how the runner ended the instance (the first reason stays).
func (in *instance) end(how string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ended == "" {
		in.ended, in.endedAt = how, time.Now()
	}
}

// armed is a fault a start step armed, to judge at the end.
type armed struct {
	service string
	svc     *service // the process it was armed for
	f       *fault.Fault
	a       strike
}

// strike is a trigger armed on a proxy.
type strike = broker.Strike

var _ steps.Services = (*Run)(nil)

// New prepares a system run; nothing starts before a start step.
func New(cfg Config) *Run {
	return &Run{cfg: cfg, svcs: map[string]*service{}}
}

// Start starts a service behind new proxies, arms f on them, and waits for
// the service to be ready.
// A replicated service's name starts each of its replicas in turn, each
// ready before the next (a fault names one replica: see group).
func (r *Run) Start(ctx context.Context, name string, env map[string]string, f *fault.Fault) (string, error) {
	if names, ok := r.group(name); ok {
		if f != nil {
			return "", r.oneProcess(name)
		}
		return each(names, func(n string) (string, error) { return r.start(ctx, n, env, nil) })
	}
	return r.start(ctx, name, env, f)
}

// start is Start with any further faults armed on the same process (a
// start step's also:).
func (r *Run) start(ctx context.Context, name string, env map[string]string, f *fault.Fault, more ...*fault.Fault) (string, error) {
	spec, ok := r.cfg.System.Services[name]
	if !ok {
		return "", fmt.Errorf("no service %q in %s; services: %s", name, r.cfg.System.File, strings.Join(r.cfg.System.Names(), ", "))
	}
	if err := r.gone(ctx, name); err != nil {
		return "", err
	}
	s := &service{name: name, inst: &instance{service: name}}
	if f != nil {
		s.inst.fault = &f.Trigger
	}
	if c := steps.CallOf(ctx); c != nil {
		s.inst.at = c.Pos
	}
	vars, secrets, err := r.proxies(s)
	if err != nil {
		s.close()
		return "", err
	}
	vars["replica"] = strconv.Itoa(max(1, spec.Replica))
	r.watch(s, restartOf(ctx))
	ready, err := r.onProxies(name, s, spec, append([]*fault.Fault{f}, more...))
	if err != nil {
		s.close()
		return "", err
	}
	defer ready.retire() // ready or not, the wait is over
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
	s.given = told(s, append(slices.Clone(envList), argv...))
	proc, err := servers.StartService(ctx, servers.ServiceSpec{Name: name, Argv: argv, Dir: r.cfg.System.Dir, Env: envList, Ready: spec.Ready, ReadyOn: ready.await(), ReadyTimeout: spec.ReadyTimeout, Secrets: secrets,
		Started: func(p *servers.Service) {
			s.mu.Lock()
			s.proc, s.since = p, time.Now()
			s.mu.Unlock()
			s.inst.mu.Lock()
			s.inst.proc = p
			s.inst.mu.Unlock()
			r.mu.Lock()
			r.insts = append(r.insts, s.inst)
			r.mu.Unlock()
		}})
	if err != nil {
		s.inst.end("never ready: " + firstLine(err.Error()))
		s.close()
		return "", err
	}
	r.mu.Lock()
	r.svcs[name] = s
	delete(r.gaveUp, name) // started again: whatever gave up before runs now
	r.mu.Unlock()
	detail := fmt.Sprintf("started %s (pid %d); producer_db via %s, consumer_db via %s, broker via %s", name, proc.PID(), s.pg[0].Addr(), s.pg[1].Addr(), r.brokerVia(s))
	if ready != nil {
		detail += "; ready at its first " + ready.on.On()
	}
	for _, f := range append([]*fault.Fault{f}, more...) {
		if f != nil {
			detail += "; armed " + f.String()
		}
	}
	return detail, nil
}

// onProxies sets up on s's proxies, before its process starts, what the
// start asks of them: its faults (nil ones skipped) armed, the services'
// own output followed, and its ready: {on: …} watched.
//
// The ready watch is armed first: a proxy stops at the first trigger that
// strikes a crossing, and the watch never strikes, so a fault on the very
// crossing the service is ready at still lets the watch count it.
func (r *Run) onProxies(name string, s *service, spec *system.Service, faults []*fault.Fault) (*readyWatch, error) {
	ready, err := r.watchReady(s, spec)
	if err != nil {
		return nil, err
	}
	for _, f := range faults {
		if f == nil {
			continue
		}
		if err := r.arm(name, s, f); err != nil {
			ready.retire()
			return nil, err
		}
	}
	if err := r.follow(name, s); err != nil {
		ready.retire()
		return nil, err
	}
	return ready, nil
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
				return fmt.Errorf("service %s is running already: its fault %s has not fired yet (wait for what it leaves behind with expect's within:, or stop or kill it first)", name, a.f)
			}
		}
		return fmt.Errorf("service %s is running already: stop or kill it first", name)
	}
	delete(r.svcs, name)
	// What it left running (a daemon it forked and exited) goes with it.
	_ = s.proc.Kill(ctx)
	s.close()
	return nil
}

func (r *Run) brokerVia(s *service) string {
	if s.broker != nil {
		return s.broker.Address()
	}
	return r.cfg.BrokerName + " directly (no protocol proxy for it)"
}

// proxies starts the service's proxies and returns the ${…} that name them
// and the secrets its output must hide.
func (r *Run) proxies(s *service) (map[string]string, []string, error) {
	vars := maps.Clone(r.cfg.Vars)
	for i, link := range []struct{ name, url string }{{"producer_db", r.cfg.ProducerURL}, {"consumer_db", r.cfg.ConsumerURL}} {
		u, err := url.Parse(link.url)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not a URL", link.name)
		}
		if s.pg[i], err = pgwire.ListenWith(u.Host, pgwire.DefaultLimits()); err != nil {
			return nil, nil, err
		}
		if sl := r.cfg.PGSlots[i]; sl != nil {
			s.pg[i].ShareSlots(sl)
		}
		vars[link.name+".url"] = via(u, s.pg[i].Addr(), "sslmode", "disable")
	}
	var err error
	vars["broker.url"] = r.cfg.BrokerURL
	if vars["broker.address"], err = address(r.cfg.BrokerURL); err != nil {
		return nil, nil, err
	}
	if k, ok := broker.Lookup(r.cfg.BrokerName); ok && k.Proxy != nil {
		if s.broker, err = k.Proxy.Listen(r.cfg.BrokerURL); err != nil {
			return nil, nil, fmt.Errorf("%s proxy: %w", r.cfg.BrokerName, err)
		}
		r.mu.Lock()
		r.starts++
		if s.inst != nil {
			s.inst.start = r.starts
		}
		r.logs = append(r.logs, brokerLog{service: s.name, start: r.starts, proxy: s.broker, svc: s})
		r.mu.Unlock()
		vars["broker.url"], vars["broker.address"] = s.broker.URL(), s.broker.Address()
	}
	// A scenario variable may name a placeholder (url: "${producer_db.url}"):
	// it is this service's value now (the scenario's variables are resolved
	// among themselves at load; what is left are the system's names).
	for k, v := range vars {
		if strings.Contains(v, "${") {
			if e, err := system.Expand(v, vars); err == nil {
				vars[k] = e
			}
		}
	}
	// Every URL handed out, and the servers' own: their passwords (user
	// info, query, DSN) and tokens, which the service's output hides in
	// every encoding (redact.Set).
	secrets := redact.URLSecrets(r.cfg.ProducerURL, r.cfg.ConsumerURL, r.cfg.BrokerURL, vars["producer_db.url"], vars["consumer_db.url"], vars["broker.url"])
	return vars, secrets, nil
}

// address is ${broker.address}: the HOST:PORT of every server a broker
// URL names (kafka://a:9092,b:9092; nats://a:4222,nats://b:4222;
// amqp://user:pw@host:5672/vhost), comma-separated, without scheme or
// credentials: what kafkajs's brokers, franz-go's SeedBrokers and
// librdkafka's bootstrap.servers take.
func address(brokerURL string) (string, error) {
	var out []string
	for _, part := range strings.Split(brokerURL, ",") {
		part = strings.TrimSpace(part)
		if !strings.Contains(part, "://") {
			part = "kafka://" + part // a further seed of kafka://a:1,b:2
		}
		u, err := url.Parse(part)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("broker: %s is not a URL with a host", redact.URL(brokerURL))
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), defaultPort(u.Scheme))
		}
		out = append(out, host)
	}
	return strings.Join(out, ","), nil
}

// defaultPort is the port a broker URL of scheme means without one, as
// the kind of that scheme says (broker.Kind.Ports); "" when none does.
func defaultPort(scheme string) string {
	for _, k := range broker.Kinds() {
		if p, ok := k.Ports[scheme]; ok {
			return p
		}
	}
	return ""
}

// told reports which of s's proxies the words (env and argv) name.
func told(s *service, words []string) [3]bool {
	var out [3]bool
	addrs := [3]string{s.pg[0].Addr(), s.pg[1].Addr(), ""}
	if s.broker != nil {
		addrs[2] = s.broker.Address()
	}
	for i, a := range addrs {
		out[i] = a != "" && slices.ContainsFunc(words, func(w string) bool { return strings.Contains(w, a) })
	}
	return out
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

// arm hands the fault to the service's proxy for its link, as loaded (a
// broker's compiled by its dialect), with the function its kill calls.
func (r *Run) arm(name string, s *service, f *fault.Fault) error {
	kill := func() error {
		s.mu.Lock()
		proc := s.proc
		s.mu.Unlock()
		if proc == nil {
			return errors.New("the service had not started")
		}
		s.inst.end("killed by the fault")
		return proc.Kill(context.Background())
	}
	var x strike
	var err error
	t := f.Trigger
	t.Action.Kill = kill
	switch {
	case t.Link == fault.ProducerDB:
		x, err = s.pg[0].Arm(t)
	case t.Link == fault.ConsumerDB:
		x, err = s.pg[1].Arm(t)
	case s.broker == nil:
		// The runner's gate skips such a scenario before it starts
		// (runner.faultSkip): here, a Run driven without it.
		return fmt.Errorf("%s needs a %s protocol proxy; the runner has none for it", t.On(), r.cfg.BrokerName)
	default:
		x, err = r.armBroker(s, f, kill)
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.faults = append(r.faults, &armed{service: name, svc: s, f: f, a: x})
	r.mu.Unlock()
	return nil
}

// armBroker arms f as the run's broker's dialect compiled it. A fault its
// proxy does not take (XADD on Kafka: written for another broker) skips
// the scenario on this broker, with the compiled reason: the runner's gate
// decides that before the scenario starts (runner.faultSkip), so here it
// is an error, of a Run driven without that gate.
func (r *Run) armBroker(s *service, f *fault.Fault, kill func() error) (strike, error) {
	c, ok := f.For(r.cfg.BrokerName)
	if !ok {
		return nil, fmt.Errorf("%s was not compiled for %s's proxy", f.On(), r.cfg.BrokerName)
	}
	if c.Skip != nil {
		return nil, fmt.Errorf("%s does not apply on %s: %v", f.On(), r.cfg.BrokerName, c.Skip)
	}
	c.Action.Kill = kill
	return s.broker.Arm(c)
}

// Stop stops a service: SIGTERM, SIGKILL after StopGrace. The SIGKILL is
// part of stop (a service that drains slowly is stopped so), not an error.
func (r *Run) Stop(ctx context.Context, name string) (string, error) {
	if names, ok := r.group(name); ok {
		return r.stopAll(ctx, names)
	}
	s, err := r.take(name)
	if err != nil {
		return "", err
	}
	defer s.close()
	err = s.proc.Stop(ctx, StopGrace)
	how, detail := "stopped", "stopped "+name
	if errors.Is(err, servers.ErrKilledAfterGrace) {
		how = fmt.Sprintf("killed %s after the SIGTERM", StopGrace)
		detail = fmt.Sprintf("%s did not exit within %s of SIGTERM: SIGKILLed with everything it started", name, StopGrace)
		err = nil
	}
	s.inst.end(how + by(ctx, "stop"))
	return detail, err
}

// Kill SIGKILLs a service and every process it started.
func (r *Run) Kill(ctx context.Context, name string) error {
	if names, ok := r.group(name); ok {
		_, err := each(r.running(names), func(n string) (string, error) { return "", r.Kill(ctx, n) })
		return err
	}
	s, err := r.take(name)
	if err != nil {
		return err
	}
	defer s.close()
	s.inst.end("killed" + by(ctx, "kill"))
	return s.proc.Kill(ctx)
}

// by names the step that ended a service: " by the stop step at f:9:5".
func by(ctx context.Context, step string) string {
	if c := steps.CallOf(ctx); c != nil {
		return fmt.Sprintf(" by the %s step at %s", step, c.Pos)
	}
	return ""
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
	r.unsupervise(name) // a stop or kill step means it: no restart
	return s, nil
}

func (s *service) close() {
	for _, p := range s.pg {
		if p != nil {
			p.Close()
		}
	}
	if s.broker != nil {
		s.broker.Close()
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
			if a.a.Holding() {
				errs = append(errs, fmt.Errorf("the fault %s on %s struck and was still holding the reply when the scenario ended (wait past its %s with expect's within:, or use a shorter delay)", a.f, a.service, a.f.Action.Delay))
				continue
			}
			if !a.f.Optional {
				errs = append(errs, fmt.Errorf("the fault %s on %s never fired", a.f, a.service))
			}
			continue
		}
		if err := a.a.Err(); errors.As(err, &u) {
			return &steps.SkipError{Reason: fmt.Sprintf("the fault %s on %s: %v", a.f, a.service, err)}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("the fault %s on %s: %w", a.f, a.service, err))
		}
	}
	return errors.Join(errs...)
}

// Output is what one process of a service wrote (secrets hidden), with the
// start step that started it and how it ended.
type Output struct {
	Service string
	Start   diag.Pos // the start step
	Fault   string   // the fault armed with that start: "consumer_db.commit(table=inbox) do=kill"; "" for none
	PID     int
	// Ended is how it ended: "killed by the fault", "stopped by the stop
	// step at f:9:5", "exited by itself (exit status 1)", "still running
	// when the scenario ended".
	Ended string
	Text  string
}

// Outputs are every service process's output so far, the killed ones too,
// in start order.
func (r *Run) Outputs() []Output {
	r.mu.Lock()
	insts := slices.Clone(r.insts)
	r.mu.Unlock()
	out := make([]Output, 0, len(insts))
	for _, in := range insts {
		in.mu.Lock()
		o := Output{Service: in.service, Start: in.at, PID: in.proc.PID(), Ended: in.ended, Text: in.proc.Output()}
		in.mu.Unlock()
		if in.fault != nil {
			o.Fault = faultText(*in.fault)
		}
		if o.Ended == "" {
			switch exited, err := in.proc.Exited(); {
			case !exited:
				o.Ended = "still running when the scenario ended"
			case err != nil:
				o.Ended = fmt.Sprintf("exited by itself (%v)", err)
			default:
				o.Ended = "exited by itself (exit status 0)"
			}
		}
		out = append(out, o)
	}
	return out
}

// faultText is a fault as a service's label shows it: nth only when not 1.
func faultText(t fault.Trigger) string {
	text := t.On()
	if t.Nth > 1 {
		text += fmt.Sprintf(" nth=%d", t.Nth)
	}
	return text + " do=" + t.Action.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Close kills every service still running, and every process each
// started (see servers.Service.Kill), and closes its proxies.
func (r *Run) Close(ctx context.Context) error {
	r.stopSupervisors()
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
