package steps

import (
	"slices"

	"github.com/outboxdrill/runner/broker"
)

// A step's parameter struct says everything the runner must know about the
// step beyond running it, by implementing any of the small interfaces below
// (found by type assertion, as venom finds its executors' extras). The
// runner asks a Call, never a step type: adding a step is one define call
// plus its parameter struct, and the step shows up in validation, the
// reference, the JSON Schema, capability derivation, scheduling, the history
// checker and the sequence diagram without an edit elsewhere.

// Isolation is how a step constrains the scheduling of its scenario.
type Isolation struct {
	// Alone: the step kills, stops or starts a PostgreSQL, so its scenario
	// runs with no other scenario on that server at the same time (with
	// SplitDBs, the runner's own servers give such scenarios servers of
	// their own; else it runs alone).
	Alone bool
	// AloneOnBroker: the step kills, stops or starts the broker's server,
	// which only the run's scenarios on that broker share: no other
	// scenario on the same broker runs at the same time.
	AloneOnBroker bool
	// SplitDBs: the step faults a PostgreSQL server, so the producer's and
	// the consumer's databases must live on a server each.
	SplitDBs bool
}

// Isolated is implemented by parameters of steps that constrain scheduling.
type Isolated interface{ Isolation() Isolation }

// Needful is implemented by parameters of steps that need broker
// capabilities beyond publish, read and ack; a scenario that uses them is
// skipped, with the capability named, on a broker that lacks one.
type Needful interface{ Needs() []broker.Capability }

// Consumption is who a consuming step reads as and what it writes.
type Consumption struct {
	Consumer string // consumer id: the group and the inbox dedupe scope
	Model    string // the read model it updates
	// TakesOver: it takes over entries delivered before (claim), rather
	// than reading new ones (consume).
	TakesOver bool
}

// Consuming is implemented by parameters of steps that consume as a
// consumer id: the history checker judges every consumer id a scenario
// names, and brokers declare their queues or groups for them up front.
type Consuming interface{ Consumes() Consumption }

// Participant is a lifeline of the sequence diagram.
type Participant string

// The diagram's participants.
const (
	ProducerDB Participant = "PPG"
	RelayP     Participant = "R"
	BrokerP    Participant = "B"
	ConsumerDB Participant = "CPG"
)

// Participants are the diagram's lifelines in order, with their titles.
var Participants = []struct {
	ID    Participant
	Title string
}{{ProducerDB, "Producer PG"}, {RelayP, "Relay"}, {BrokerP, "Broker"}, {ConsumerDB, "Consumer PG"}}

// Diagram is what a step draws its run on: a sequence diagram.
type Diagram interface {
	// Msg draws an arrow ("->>" a call, "-->>" a reply) labelled text.
	Msg(from, to Participant, arrow, text string)
	// Note draws a note over one or more participants.
	Note(text string, over ...Participant)
}

// Drawn is implemented by parameters of steps that draw their run; a step
// that does not is drawn as one note with its call.
type Drawn interface {
	Draw(d Diagram, r Result)
	// FaultSite is where the step's injected faults strike.
	FaultSite() Participant
}

// Isolation is the scheduling constraint of the call's step.
func (c *Call) Isolation() Isolation {
	if s, ok := c.Params.(Isolated); ok {
		return s.Isolation()
	}
	return Isolation{}
}

// Consumes is the consumer id and read model of a consuming call; ok is
// false for a step that does not consume.
func (c *Call) Consumes() (Consumption, bool) {
	s, ok := c.Params.(Consuming)
	if !ok {
		return Consumption{}, false
	}
	cons := s.Consumes()
	if cons.Model == "" {
		cons.Model = cons.Consumer
	}
	return cons, true
}

// Needs is what the call's step asks of the broker, sorted. A state check
// the broker cannot read does not count: it is n/a there, and the scenario
// runs on.
func (c *Call) Needs() []broker.Capability {
	var out []broker.Capability
	if s, ok := c.Params.(Needful); ok {
		out = append(out, s.Needs()...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Draw draws the call's run: its faults where they strike, then what the
// step did.
func (c *Call) Draw(d Diagram, r Result) {
	s, drawn := c.Params.(Drawn)
	site := ConsumerDB
	if drawn {
		site = s.FaultSite()
	}
	for _, f := range c.Faults() {
		d.Note("FAULT "+f+" ("+c.Pos.String()+")", site)
	}
	if drawn {
		s.Draw(d, r)
		return
	}
	d.Note(c.String(), ProducerDB, ConsumerDB)
}

// SlotUser is implemented by parameters of steps that read or act on the
// scenario's logical replication slot (the CDC relay, the slot step).
type SlotUser interface{ UsesCDC() bool }

// UsesCDC reports whether the call needs the scenario's replication slot.
func (c *Call) UsesCDC() bool {
	s, ok := c.Params.(SlotUser)
	return ok && s.UsesCDC()
}
