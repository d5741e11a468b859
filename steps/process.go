package steps

import (
	"context"
	"fmt"

	"github.com/outboxdrill/runner/broker"
)

// ProcessParams are the process faults of a server the runner manages.
type ProcessParams struct {
	Kill    bool `param:"kill" fault:"yes" doc:"SIGKILL the server process (a crash); needs the runner's own server, else the scenario is skipped"`
	Stop    bool `param:"stop" fault:"yes" doc:"stop the server cleanly"`
	Start   bool `param:"start" doc:"start the stopped or killed server again, same address, same data directory (after a kill: crash recovery)"`
	Restart bool `param:"restart" fault:"yes" doc:"kill, then start"`
}

// Action is the one process action asked for, or "".
func (p *ProcessParams) Action() string {
	for _, a := range []struct {
		on   bool
		name string
	}{{p.Kill, "kill"}, {p.Stop, "stop"}, {p.Start, "start"}, {p.Restart, "restart"}} {
		if a.on {
			return a.name
		}
	}
	return ""
}

// actions counts the actions asked for.
func (p *ProcessParams) actions() int {
	n := 0
	for _, on := range []bool{p.Kill, p.Stop, p.Start, p.Restart} {
		if on {
			n++
		}
	}
	return n
}

// NeedsAction: a process step without an action does nothing (Validate).
func (*ProcessParams) NeedsAction() {}

func (p *ProcessParams) Validate() error {
	switch p.actions() {
	case 0:
		return fmt.Errorf("needs an action: kill, stop, start or restart")
	case 1:
		return nil
	}
	return fmt.Errorf("takes one action at a time (kill, stop, start or restart)")
}

// BrokerParams are the parameters of the broker step.
type BrokerParams struct {
	Trim *int `param:"trim" doc:"keep only the newest N entries (XTRIM MAXLEN): the broker loses published entries, as a retention limit or a restart without AOF would"`
	ProcessParams
}

func (p *BrokerParams) Validate() error {
	n := p.actions()
	if p.Trim != nil {
		n++
	}
	switch {
	case n == 0:
		return fmt.Errorf("broker needs an action, e.g. broker(trim=0) or broker(kill)")
	case n > 1:
		return fmt.Errorf("broker takes one action at a time (trim, kill, stop, start or restart)")
	case p.Trim != nil && *p.Trim < 0:
		return fmt.Errorf("trim: keep 0 or more entries, got %d", *p.Trim)
	}
	return nil
}

// DBParams are the parameters of producer_db and consumer_db: a process
// fault of one side's PostgreSQL server.
type DBParams[S dbSide] struct{ ProcessParams }

// dbSide names the side a DBParams acts on, as a type, so that each of the
// two steps knows its side from its parameters alone.
type dbSide interface{ side() string }

type producerSide struct{}
type consumerSide struct{}

func (producerSide) side() string { return "producer" }
func (consumerSide) side() string { return "consumer" }

// Isolation: a PostgreSQL server is shared by the run's scenarios, and a
// fault of one side needs the other side on a server of its own.
func (*DBParams[S]) Isolation() Isolation { return Isolation{Alone: true, SplitDBs: true} }

func (*DBParams[S]) FaultSite() Participant {
	var s S
	if s.side() == "producer" {
		return ProducerDB
	}
	return ConsumerDB
}

// Draw notes a start; kill, stop and restart are faults, noted as such.
func (p *DBParams[S]) Draw(d Diagram, _ Result) {
	var s S
	if p.Start {
		d.Note(s.side()+"'s PostgreSQL start", p.FaultSite())
	}
}

// Isolation: killing, stopping or starting the broker hits every scenario
// on that broker (each broker of a run has a server of its own); trimming
// touches only this scenario's stream.
func (p *BrokerParams) Isolation() Isolation { return Isolation{AloneOnBroker: p.Action() != ""} }

func (p *BrokerParams) Needs() []broker.Capability {
	switch {
	case p.Trim == nil:
		return nil
	case *p.Trim == 0: // everything at once: a purge
		return []broker.Capability{broker.Purge}
	}
	return []broker.Capability{broker.Retention}
}

func (*BrokerParams) FaultSite() Participant { return BrokerP }

func (p *BrokerParams) Draw(d Diagram, r Result) {
	if p.Trim != nil {
		d.Note(fmt.Sprintf("trim to %d: %d entries dropped", *p.Trim, r.Outcome["trimmed"]), BrokerP)
		return
	}
	if p.Start { // kill, stop and restart are faults, noted as such
		d.Note("broker start", BrokerP)
	}
}

func processDefs() []*Def {
	return []*Def{
		Define("broker", "Act on the broker itself. trim: drop all but the newest N entries — published events the broker no longer holds.",
			[]Key{{"trimmed", "entries dropped"}}, runBroker),
		Define("producer_db", "Act on the producer's PostgreSQL server process (kill, stop, start, restart). After kill + start the server runs crash recovery: what was committed is there, what was not is gone. Skipped on a server given with --pg.",
			nil, runPostgres[producerSide]),
		Define("consumer_db", "Act on the consumer's PostgreSQL server process (kill, stop, start, restart), a server of its own: the producer's keeps running. Skipped on a server given with --pg.",
			nil, runPostgres[consumerSide]),
	}
}

// ProcessSkip is why step c's process action (kill, stop, start or
// restart of a server) cannot run through ctl, as the scenario's skip
// reason ("broker(kill): …"), or "" when it can or c has none. Whose
// server it is is known once the servers are open: the runner's gate asks
// every step before it acquires anything for the scenario.
func ProcessSkip(ctl ProcessControl, c *Call) string {
	ps, ok := c.Params.(processStep)
	if !ok {
		return ""
	}
	s, step, action := ps.process()
	if action == "" {
		return ""
	}
	if why := cannotWhy(ctl, s); why != "" {
		return fmt.Sprintf("%s(%s): %s", step, action, why)
	}
	return ""
}

// processStep is a step that acts on a server process: which server, the
// step's name and the action asked for ("" none).
type processStep interface {
	process() (s Server, step, action string)
}

func (p *DBParams[S]) process() (Server, string, string) {
	var s S
	return Server(s.side()), s.side() + "_db", p.Action()
}

func (p *BrokerParams) process() (Server, string, string) { return BrokerServer, "broker", p.Action() }

// cannotWhy is why ctl cannot fault server s, "" when it can.
func cannotWhy(ctl ProcessControl, s Server) string {
	if ctl == nil {
		return "the runner controls no server process here"
	}
	return ctl.Cannot(s)
}

// cannot: the runner's gate skipped a scenario whose process fault cannot
// run here (ProcessSkip) before anything was acquired for it; a step that
// meets one anyway ran on an Env outside that gate, and fails saying so.
func cannot(env *Env, s Server, step, action string) error {
	if why := cannotWhy(env.Control, s); why != "" {
		return fmt.Errorf("%s(%s): %s", step, action, why)
	}
	return nil
}

func runBroker(ctx context.Context, env *Env, p *BrokerParams) (Result, error) {
	if a := p.Action(); a != "" {
		if err := cannot(env, BrokerServer, "broker", a); err != nil {
			return Result{}, err
		}
		if err := env.Control.Broker(ctx, a); err != nil {
			return Result{}, err
		}
		env.brokerDown = a == "kill" || a == "stop"
		if cb, ok := env.Broker.(broker.Comeback); ok && (a == "start" || a == "restart") {
			cb.ServerBack()
		}
		return Result{Details: []string{"broker " + a}}, nil
	}
	n, err := env.Broker.Trim(ctx, *p.Trim)
	return Result{Outcome: map[string]int64{"trimmed": n}, Details: []string{fmt.Sprintf("XTRIM MAXLEN %d: %d entries dropped", *p.Trim, n)}}, err
}

// runPostgres is the producer_db and consumer_db steps.
func runPostgres[S dbSide](ctx context.Context, env *Env, p *DBParams[S]) (Result, error) {
	var s S
	side, a := s.side(), p.Action()
	if err := cannot(env, Server(side), side+"_db", a); err != nil {
		return Result{}, err
	}
	if err := env.Control.Postgres(ctx, Server(side), a); err != nil {
		return Result{}, err
	}
	// Connections to the old process are dead: the pool starts afresh,
	// so later steps see the server as it is now (down, or recovered).
	pool := env.Producer
	if side == "consumer" {
		pool = env.Consumer
	}
	pool.Reset()
	return Result{Details: []string{side + "'s PostgreSQL " + a}}, nil
}
