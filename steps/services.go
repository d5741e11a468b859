package steps

import (
	"context"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/system"
)

// Services runs a team's own processes (the services of a system file) for
// one scenario, each behind fault proxies of its own.
type Services interface {
	// Start starts a service, with f armed on its connections when given,
	// and returns once it is ready; detail says what runs where.
	Start(ctx context.Context, name string, env map[string]string, f *fault.Trigger) (detail string, err error)
	// Stop sends SIGTERM, then SIGKILL after a grace; Kill sends SIGKILL to
	// the service's process group at once.
	Stop(ctx context.Context, name string) error
	Kill(ctx context.Context, name string) error
}

// FaultParams arm one fault on a service's connections.
type FaultParams struct {
	On  string `param:"on" required:"yes" doc:"where: <link>.<boundary>(<filter>); links producer_db and consumer_db with commit(table=T) or statement(table=T) (a transaction's tables are what it wrote), broker with request(CMD) or reply(CMD); e.g. consumer_db.commit(table=inbox), broker.reply(XADD)"`
	Nth int64  `param:"nth" default:"1" min:"1" doc:"strike at the Nth crossing of the boundary"`
	Do  string `param:"do" required:"yes" doc:"kill: SIGKILL the service while the reply is held (it never sees it); cut: close its connection; error: a commit really rolls back and the client gets an error (Redis: an -ERR reply, the command not forwarded); delay(250ms): hold the reply"`

	trigger fault.Trigger
}

// Validate parses the fault once, into the trigger the proxy gets as it is.
func (f *FaultParams) Validate() error {
	t, err := system.ParseTrigger(f.On)
	if err != nil {
		return ParamErrorf("on", "on: %v", err)
	}
	if t.Action, err = system.ParseAction(f.Do); err != nil {
		return ParamErrorf("do", "do: %v", err)
	}
	t.Nth = int(f.Nth)
	f.trigger = t
	return nil
}

// ServiceParams name a service of the system file.
type ServiceParams struct {
	Service string `param:"service" required:"yes" primary:"yes" doc:"the service's name in the system file"`
}

// StartParams start a service.
type StartParams struct {
	ServiceParams
	Env   map[string]string `param:"env" doc:"environment added to the system file's for this start (values may use ${…})"`
	Fault *FaultParams      `param:"fault" doc:"arm a fault on this service's connections: {on, nth, do}"`
}

func init() {
	Define("start", "Start a service of the system file (its own process group, behind fault proxies of its own) and wait until it is ready; with fault, arm a fault on its connections. The fault must strike before the scenario ends.",
		nil, runStart)
	Define("stop", "Stop a service: SIGTERM, then SIGKILL after a grace.", nil,
		func(ctx context.Context, env *Env, p *ServiceParams) (Result, error) {
			s, err := env.services()
			if err != nil {
				return Result{}, err
			}
			return Result{Details: []string{"stopped " + p.Service}}, s.Stop(ctx, p.Service)
		})
	Define("kill", "SIGKILL a service's process group: a crash at no particular boundary (use start's fault for an exact one).", nil,
		func(ctx context.Context, env *Env, p *ServiceParams) (Result, error) {
			s, err := env.services()
			if err != nil {
				return Result{}, err
			}
			return Result{Details: []string{"killed " + p.Service}}, s.Kill(ctx, p.Service)
		})
}

func runStart(ctx context.Context, env *Env, p *StartParams) (Result, error) {
	s, err := env.services()
	if err != nil {
		return Result{}, err
	}
	var f *fault.Trigger
	if p.Fault != nil {
		f = &p.Fault.trigger
	}
	detail, err := s.Start(ctx, p.Service, p.Env, f)
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
// any other step, and for a start without a fault.
func StartFault(c *Call) (f fault.Trigger, pos diag.Pos, ok bool) {
	p, isStart := c.Params.(*StartParams)
	if !isStart || p.Fault == nil {
		return fault.Trigger{}, diag.Pos{}, false
	}
	return p.Fault.trigger, onPos(c), true
}

// onPos is where the on: of a start step's fault map is.
func onPos(c *Call) diag.Pos {
	for _, a := range c.Args {
		if a.Key != "fault" {
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
