package steps

import (
	"context"
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Services runs a team's own processes (the services of a system file) for
// one scenario, each behind fault proxies of its own.
type Services interface {
	// Start starts a service, with f armed on its connections when given,
	// and returns once it is ready; detail says what runs where.
	Start(ctx context.Context, name string, env map[string]string, f *fault.Fault) (detail string, err error)
	// Stop sends SIGTERM, then SIGKILL after a grace (detail says which
	// ended it); Kill sends SIGKILL to the service's process group at once.
	Stop(ctx context.Context, name string) (detail string, err error)
	Kill(ctx context.Context, name string) error
}

// FaultParams arm one fault on a service's connections.
type FaultParams struct {
	On  string `param:"on" required:"yes" doc:"where: <link>.<boundary>(<filter>); links producer_db and consumer_db with commit(table=T) or statement(table=T) (a transaction's tables are what it wrote), broker with request(CMD) or reply(CMD); e.g. consumer_db.commit(table=inbox), broker.reply(XADD)"`
	Nth int64  `param:"nth" default:"1" min:"1" doc:"strike at the Nth crossing of the boundary"`
	Do  string `param:"do" required:"yes" doc:"kill: SIGKILL the service while the reply is held (it never sees it); cut: close its connection; error: a commit really rolls back and the client gets an error (Redis: an -ERR reply, the command not forwarded); delay(250ms): hold the reply; duplicate: a publish reaches the broker twice, a delivery the client twice; drop: a reply or a delivery never reaches the client, the connection left open"`
	// Optional is how runner explore writes a finding's faults: the fixed
	// service may never cross the boundary again, and its scenario must
	// pass then ("fails until the bug is fixed").
	Optional bool `param:"optional" doc:"a fault that need not strike: one that never fired does not fail the scenario (runner explore writes its findings so: a fixed service may take another path)"`

	fault *fault.Fault
}

// Validate loads the fault once (fault.Load): its trigger parsed, and
// compiled for each broker's proxy, which the steps hand as they are to
// the services. Every problem of on:, nth: and do: is said at once, each
// at its key. An operation no broker's proxy takes is kept, with why
// (fault.Fault.Unsuited): which broker's words it should have been in is
// known only with the brokers of the system file and of the run
// (scenario's checkBrokerFaults).
func (f *FaultParams) Validate() error {
	var probs []fault.Problem
	f.fault, probs = fault.Load(fault.Spec{On: f.On, Nth: int(f.Nth), Do: f.Do, Optional: f.Optional}, faultDialects())
	var errs []error
	for _, p := range probs {
		if un := (*fault.UnsuitedError)(nil); !errors.As(p.Err, &un) {
			errs = append(errs, OwnParamErrorf(p.Key, "%v", p))
		}
	}
	return errors.Join(errs...)
}

// faultDialects are the dialects a fault is loaded with: every registered
// broker's proxy.
func faultDialects() []fault.Dialect { return broker.Dialects(broker.Kinds()) }

func (*FaultParams) validatesEachParam() {}

// ServiceParams name a service of the system file.
type ServiceParams struct {
	Service string `param:"service" required:"yes" primary:"yes" doc:"the service's name in the system file"`
}

// StartParams start a service.
type StartParams struct {
	ServiceParams
	Env   map[string]string `param:"env" doc:"environment added to the system file's for this start (values may use ${…})"`
	Fault *FaultParams      `param:"fault" doc:"arm a fault on this service's connections: {on, nth, do}"`
	// Also and Then are a second fault: runner explore's depth 2.
	Also *FaultParams `param:"also" doc:"a second fault, armed with fault on the same process; each counts its own crossings from the process's start"`
	// Restart: a supervisor as systemd or Kubernetes would be one.
	Restart bool         `param:"restart" doc:"supervise the service: start it again (without the fault) whenever its process ends — killed by the fault, dead of a cut connection, exited — as systemd's Restart=always or a Kubernetes pod would, until a stop or kill step ends it (at most 10 restarts)"`
	Then    *FaultParams `param:"then" doc:"a fault armed on the process the supervisor starts first after this one ended: a fault during the recovery from the first (needs restart: true)"`
}

func (p *StartParams) Validate() error {
	switch {
	case p.Then != nil && !p.Restart:
		return ParamErrorf("then", "then: needs restart: true (it is armed on the process the supervisor restarts)")
	case p.Also != nil && p.Fault == nil:
		return ParamErrorf("also", "also: is a second fault: give fault: first")
	}
	return nil
}

// StartFaults are the faults a start step arms: Fault and Also on its
// process, Then on the supervisor's first restart of it.
type StartFaults struct {
	Fault, Also, Then *fault.Fault
	Restart           bool // supervised
}

// Supervisor starts a service under supervision (start's restart: true):
// started again whenever its process ends, also while it starts up.
type Supervisor interface {
	StartSupervised(ctx context.Context, name string, env map[string]string, fs StartFaults) (detail string, err error)
}

// Armer arms a fault on a service's running process (the fault step).
type Armer interface {
	Arm(ctx context.Context, name string, f *fault.Fault) (detail string, err error)
}

func serviceDefs() []*Def {
	return []*Def{
		Define("start", "Start a service of the system file (its own process group, behind fault proxies of its own) and wait until it is ready; with fault, arm a fault on its connections. The fault must strike before the scenario ends.",
			nil, runStart),
		Define("fault", "Arm a fault on the running process of a service (a supervised one being restarted is waited for): its nth counts the crossings from this step on. It must strike before the scenario ends. runner explore's random schedules are made of these.",
			nil, runFault),
		Define("stop", "Stop a service: SIGTERM, then SIGKILL after a grace.", nil,
			func(ctx context.Context, env *Env, p *ServiceParams) (Result, error) {
				s, err := env.services()
				if err != nil {
					return Result{}, err
				}
				detail, err := s.Stop(ctx, p.Service)
				return Result{Details: []string{detail}}, err
			}),
		Define("kill", "SIGKILL a service's process group: a crash at no particular boundary (use start's fault for an exact one).", nil,
			func(ctx context.Context, env *Env, p *ServiceParams) (Result, error) {
				s, err := env.services()
				if err != nil {
					return Result{}, err
				}
				return Result{Details: []string{"killed " + p.Service}}, s.Kill(ctx, p.Service)
			}),
	}
}

func runStart(ctx context.Context, env *Env, p *StartParams) (Result, error) {
	s, err := env.services()
	if err != nil {
		return Result{}, err
	}
	fs := StartFaults{Fault: p.Fault.get(), Also: p.Also.get(), Then: p.Then.get(), Restart: p.Restart}
	if p.Restart || fs.Also != nil {
		sup, ok := s.(Supervisor)
		if !ok {
			return Result{}, fmt.Errorf("restart: these services cannot be supervised")
		}
		detail, err := sup.StartSupervised(ctx, p.Service, p.Env, fs)
		return Result{Details: []string{detail}}, err
	}
	detail, err := s.Start(ctx, p.Service, p.Env, fs.Fault)
	return Result{Details: []string{detail}}, err
}

// get is the loaded fault, nil when none was given.
func (f *FaultParams) get() *fault.Fault {
	if f == nil {
		return nil
	}
	return f.fault
}

// FaultStepParams arm a fault on a running service.
type FaultStepParams struct {
	ServiceParams
	FaultParams
}

func runFault(ctx context.Context, env *Env, p *FaultStepParams) (Result, error) {
	s, err := env.services()
	if err != nil {
		return Result{}, err
	}
	a, ok := s.(Armer)
	if !ok {
		return Result{}, fmt.Errorf("fault: these services cannot be armed while they run")
	}
	detail, err := a.Arm(ctx, p.Service, p.fault)
	return Result{Details: []string{detail}}, err
}

func (e *Env) services() (Services, error) {
	if e.Services == nil {
		return nil, fmt.Errorf("this step runs a team's services: the scenario needs a system file (system: path, or runner run --system FILE)")
	}
	return e.Services, nil
}

// StartFault is the fault a start step arms, and where its on: is written
// (the step's own position when that cannot be told); ok is false for
// a step that arms none.
func StartFault(c *Call) (f fault.Trigger, pos diag.Pos, ok bool) {
	p, isStart := c.Params.(*StartParams)
	if !isStart || p.Fault == nil || p.Fault.fault == nil {
		return fault.Trigger{}, diag.Pos{}, false
	}
	return p.Fault.fault.Trigger, onPos(c, "fault"), true
}

// StepTrigger is one fault a step arms (start's fault, also and then, the
// fault step's), loaded (its Trigger, compiled for each broker, and
// Unsuited: why no broker's proxy takes it as written), and where its on:
// is written.
type StepTrigger struct {
	*fault.Fault
	Pos diag.Pos
}

// Triggers are the faults step c arms, in the order it writes them.
func Triggers(c *Call) []StepTrigger {
	var out []StepTrigger
	add := func(f *FaultParams, key string) {
		if f != nil && f.fault != nil {
			out = append(out, StepTrigger{Fault: f.fault, Pos: onPos(c, key)})
		}
	}
	switch p := c.Params.(type) {
	case *StartParams:
		add(p.Fault, "fault")
		add(p.Also, "also")
		add(p.Then, "then")
	case *FaultStepParams:
		add(&p.FaultParams, "")
	}
	return out
}

// onPos is where the on: of the fault map under key is written (key "":
// the step's own on:), else the key's or the step's own position.
func onPos(c *Call, key string) diag.Pos {
	for _, a := range c.Args {
		if key == "" && a.Key == "on" {
			return diag.NodePos(c.Pos.File, a.Value)
		}
		if a.Key != key {
			continue
		}
		for i := 0; i+1 < len(a.Value.Content) && a.Value.Kind == yaml.MappingNode; i += 2 {
			if a.Value.Content[i].Value == "on" {
				return diag.NodePos(c.Pos.File, a.Value.Content[i+1])
			}
		}
		return a.KeyPos
	}
	return c.Pos
}
