// Package stepfixture defines a step outside package steps, as a team's
// own step would be: the tests show that it reaches validation, the
// reference, the JSON Schema, capability derivation, scheduling, the history
// checker's consumer ids and the sequence diagram with no edit in runner/.
package stepfixture

import (
	"context"
	"errors"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/steps"
)

// Name is the fixture step's name.
const Name = "fixture_poll"

// PollParams are the fixture step's parameters.
type PollParams struct {
	Consumer string        `param:"consumer" default:"ledger" doc:"consumer id the fixture polls as"`
	Idle     time.Duration `param:"idle" default:"0" doc:"poll only entries idle this long"`
	Halt     bool          `param:"halt" fault:"yes" doc:"halt a shared server afterwards"`
}

// Validate rejects what the step cannot do.
func (p *PollParams) Validate() error {
	if p.Halt && p.Idle > 0 {
		return errors.New("halt polls nothing: drop idle")
	}
	return nil
}

func (p *PollParams) Needs() []broker.Capability {
	if p.Idle > 0 {
		return []broker.Capability{broker.ClaimByIdle}
	}
	return nil
}

func (p *PollParams) Isolation() steps.Isolation { return steps.Isolation{Alone: p.Halt} }

func (p *PollParams) Consumes() steps.Consumption {
	return steps.Consumption{Consumer: p.Consumer, TakesOver: p.Idle > 0}
}

func (*PollParams) FaultSite() steps.Participant { return steps.BrokerP }

func (p *PollParams) Draw(d steps.Diagram, r steps.Result) {
	d.Msg(steps.BrokerP, steps.ConsumerDB, "->>", "FIXTURE POLL as "+p.Consumer)
}

// Step is the fixture step's definition: a program (here, the tests)
// that uses it registers it with steps.Register before it loads a
// scenario.
var Step = steps.Define(Name, "A fixture step defined outside package steps.",
	[]steps.Key{{Name: "polled", Doc: "entries polled"}},
	func(context.Context, *steps.Env, *PollParams) (steps.Result, error) {
		return steps.Result{Outcome: map[string]int64{"polled": 0}}, nil
	})
