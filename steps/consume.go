package steps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/pipeline"
)

var consumeOutcomes = []Key{
	{"delivered", "entries handed to this worker"},
	{"applied", "new in the inbox; projection updated"},
	{"duplicate", "same event id and payload already in the inbox: no effect, acked"},
	{"conflict", "same event id, different payload: identity conflict, no effect, not acked (unless dead-lettered)"},
	{"failed", "the consumer transaction rolled back: the entry is nacked, or stays pending with nack: false (unless dead-lettered)"},
	{"acked", "entries XACKed after their commit, and dead-lettered ones (with mode: ack_first every entry, before its transaction)"},
	{"dead_lettered", "entries moved to the dead-letter stream (with max_deliveries); each also counts under its own outcome, failed or conflict, and (without skip_ack) as acked"},
	{"deferred", "entries held back by strict ordering: no effect, not acked"},
	{"redelivered", "entries this worker got that the broker had delivered before (a reclaim, a redelivery after AckWait, RabbitMQ's Redelivered after a channel loss); n/a where the broker counts no deliveries (a classic Kafka group)"},
}

// DefaultConsumer is the consumer id of a step that names none (the
// consumer parameters' default tag, checked equal by a test).
const DefaultConsumer = "accounting"

// ConsumeParams are the parameters of the consume step.
type ConsumeParams struct {
	Handling
	Worker string        `param:"worker" default:"worker-1" doc:"worker id: a process instance, never a dedupe key"`
	Count  int           `param:"count" min:"1" doc:"entries to take; default all new entries"`
	Block  time.Duration `param:"block" default:"50ms" doc:"how long to wait when no entry is new (never forever)"`
	Txn    bool          `param:"broker_txn" doc:"read-process-write in ONE broker transaction (Kafka: a transactional producer emits each applied event to the topic's output and commits the group's offsets with it); each consumer transaction still commits in PostgreSQL on its own. With skip_ack the worker dies before the broker commit"`
}

// Validate: the shared rules, and those of a broker transaction.
func (p *ConsumeParams) Validate() error {
	if err := p.Handling.Validate(); err != nil {
		return err
	}
	opt := p.options(nil, "", 0)
	opt.BrokerTxn = p.Txn
	var clash *pipeline.Clash
	if !errors.As(opt.Validate(), &clash) {
		return nil
	}
	a, b := p.written(clash.A), p.written(clash.B)
	return ParamErrorf(a.param, "%s: %s and %s: %s cannot both hold: %s", a.param, a.value, b.param, b.value, clash.Why)
}

// Needs: a broker transaction needs a broker the runner drives them on.
func (p *ConsumeParams) Needs() []broker.Capability {
	needs := p.Handling.Needs()
	if p.Txn {
		needs = append(needs, broker.BrokerTxn)
	}
	return needs
}

// ClaimParams are the parameters of the claim step.
type ClaimParams struct {
	Handling
	Worker string        `param:"worker" default:"worker-2" doc:"worker id that takes the entries over"`
	Idle   time.Duration `param:"idle" default:"0" doc:"claim entries pending at least this long (XPENDING IDLE + XCLAIM min-idle)"`
	Count  int           `param:"count" min:"1" doc:"entries to claim; default all that qualify (at most 10000)"`
	Auto   bool          `param:"auto" doc:"XAUTOCLAIM (the broker scans the pending list) instead of XPENDING + XCLAIM"`
}

// Handling are the parameters consume and claim share: how each delivery
// is handled once a worker has it.
type Handling struct {
	Consumer string `param:"consumer" default:"accounting" doc:"consumer id: the group and the inbox dedupe scope. It names broker objects: a broker that cannot name it skips the scenario, saying why (NATS takes A-Z a-z 0-9 _ - only; RabbitMQ at most 220 bytes, not log or dlq)"`
	Project  string `param:"projection" doc:"read model the consumer updates; default its consumer id. Naming another consumer's read model is the renamed-consumer anti-pattern"`
	Fail     string `param:"fail" fault:"yes" enum:"divzero" doc:"divzero: SELECT 1/0 after the inbox insert, inside the consumer transaction"`
	FailOnly string `param:"fail_event" doc:"with fail: strike only the deliveries of this business event id (a poison message among healthy ones); default every delivery"`
	SkipAck  bool   `param:"skip_ack" fault:"yes" doc:"fault: commit, then crash before XACK: no ack, no nack, and the worker's connection state is gone (RabbitMQ requeues what its channel held)"`
	Nack     bool   `param:"nack" default:"true" doc:"give a failed or held-back entry back to the broker for redelivery now (RabbitMQ basic.nack with requeue, JetStream Nak; Redis Streams has none: the entry stays pending). false: it stays with the worker"`
	MaxDeliv int    `param:"max_deliveries" min:"1" doc:"an entry that failed or conflicted on its N-th delivery goes to the dead-letter stream and is acked"`
	Mode     string `param:"mode" default:"one_tx" enum:"one_tx|ack_first|split_tx" doc:"anti-patterns: ack_first XACKs before the transaction; split_tx commits inbox and projection separately (a fault strikes between)"`
	Dedupe   string `param:"dedupe" default:"event_id" enum:"event_id|entry_id|setnx" doc:"anti-patterns: entry_id dedupes by broker entry id; setnx dedupes with Redis SETNX before the PostgreSQL transaction"`
	Ordering string `param:"ordering" default:"none" enum:"none|strict" doc:"strict: apply an aggregate's events in version order; a later one is held back (deferred, not acked) until its predecessor is applied"`
}

// Validate rejects handling parameters that cannot all hold, by the
// pipeline's own rule (pipeline.ConsumeOptions.Validate): the consumer would
// have to ignore one of them, and a silently ignored fault or mode is a
// wrong verdict. The clash is reported at the second parameter, both named
// as the scenario writes them. The consumer id must be a name every broker
// takes (CheckConsumerID).
func (h *Handling) Validate() error {
	if err := CheckConsumerID(h.Consumer); err != nil {
		return ParamErrorf("consumer", "%v", err)
	}
	if h.FailOnly != "" && h.Fail == "" {
		return ParamErrorf("fail_event", "names the event a fault strikes, but no fault is set (fail: divzero)")
	}
	var seen pipeline.SeenStore
	if h.Dedupe == "setnx" {
		seen = loadTimeSeen{} // the broker's store comes with the run
	}
	var clash *pipeline.Clash
	if !errors.As(h.options(seen, "", 0).Validate(), &clash) {
		return nil
	}
	a, b := h.written(clash.A), h.written(clash.B)
	return ParamErrorf(b.param, "%s: %s and %s: %s cannot both hold: %s", a.param, a.value, b.param, b.value, clash.Why)
}

// writtenParam is a handling parameter as a scenario writes it.
type writtenParam struct{ param, value string }

// written names the parameter behind a pipeline.ConsumeOptions field.
func (h *Handling) written(option string) writtenParam {
	switch option {
	case "Strict":
		return writtenParam{"ordering", h.Ordering}
	case "SplitTx", "AckFirst":
		return writtenParam{"mode", h.Mode}
	case "Seen":
		return writtenParam{"dedupe", h.Dedupe}
	case "SkipAck":
		return writtenParam{"skip_ack", "true"}
	case "MaxDeliveries":
		return writtenParam{"max_deliveries", fmt.Sprint(h.MaxDeliv)}
	case "BrokerTxn":
		return writtenParam{"broker_txn", "true"}
	}
	return writtenParam{option, "?"}
}

// loadTimeSeen stands for the broker's side store when options are checked
// before the run: only whether there is one matters.
type loadTimeSeen struct{}

func (loadTimeSeen) MarkSeen(context.Context, string) (bool, error) { return false, nil }

// options turns the shared parameters into the pipeline's options.
func (h Handling) options(seen pipeline.SeenStore, worker string, count int) pipeline.ConsumeOptions {
	return pipeline.ConsumeOptions{
		Consumer: h.Consumer, Projection: h.Project, Worker: worker, Count: count,
		Fault: pipeline.Fault(h.Fail), FailEvent: h.FailOnly, SkipAck: h.SkipAck, MaxDeliveries: h.MaxDeliv,
		AckFirst: h.Mode == "ack_first", SplitTx: h.Mode == "split_tx", DedupeByEntry: h.Dedupe == "entry_id",
		Seen: seen, Strict: h.Ordering == "strict", KeepFailed: !h.Nack,
	}
}

func consumeDefs() []*Def {
	return []*Def{
		Define("consume", "XREADGROUP new entries ('>') as worker of the consumer's group (created on first use from the stream's start), then per entry ONE consumer transaction: insert into the inbox; if new, update the projection; commit; then XACK.",
			consumeOutcomes, runConsume),
		Define("claim", "Take over pending entries idle at least `idle` (XPENDING + XCLAIM) and handle them exactly as consume does.",
			consumeOutcomes, runClaim),
	}
}

func runConsume(ctx context.Context, env *Env, p *ConsumeParams) (Result, error) {
	opt := p.options(seenStore(env, p.Dedupe), p.Worker, p.Count)
	opt.Block, opt.BrokerTxn = p.Block, p.Txn
	res, err := (&pipeline.Consumer{DB: env.Consumer, Broker: env.Broker}).Consume(ctx, opt)
	env.conflicts += int64(res.Count(pipeline.Conflict))
	return consumeResult(res, p.Consumer, p.SkipAck, verbs(env).Ack), err
}

func runClaim(ctx context.Context, env *Env, p *ClaimParams) (Result, error) {
	opt := p.options(seenStore(env, p.Dedupe), p.Worker, p.Count)
	opt.Idle, opt.Auto = p.Idle, p.Auto
	res, err := (&pipeline.Consumer{DB: env.Consumer, Broker: env.Broker}).Claim(ctx, opt)
	env.conflicts += int64(res.Count(pipeline.Conflict))
	return consumeResult(res, p.Consumer, p.SkipAck, verbs(env).Ack), err
}

// seenStore is the broker's SETNX store when dedupe is setnx.
func seenStore(env *Env, dedupe string) pipeline.SeenStore {
	if s, ok := env.Broker.(pipeline.SeenStore); ok && dedupe == "setnx" {
		return s
	}
	return nil
}

func consumeResult(res pipeline.ConsumeResult, consumer string, skipAck bool, ack string) Result {
	r := Result{Outcome: map[string]int64{
		"delivered":     int64(len(res.Handled)),
		"applied":       int64(res.Count(pipeline.Applied)),
		"duplicate":     int64(res.Count(pipeline.Duplicate)),
		"conflict":      int64(res.Count(pipeline.Conflict)),
		"failed":        int64(res.Count(pipeline.Failed)),
		"acked":         int64(res.Acked()),
		"dead_lettered": int64(res.DeadLettered()),
		"deferred":      int64(res.Count(pipeline.Deferred)),
		"redelivered":   int64(res.Redelivered()),
	}}
	for _, h := range res.Handled {
		r.Entries = append(r.Entries, Entry{EntryID: h.ID, EventID: h.EventID, Outcome: string(h.Outcome), Consumer: consumer, Payload: h.Payload, Acked: h.Acked, DeadLettered: h.DeadLettered, Nacked: h.Nacked})
		line := fmt.Sprintf("entry %s (%s): %s", h.ID, h.EventID, h.Outcome)
		switch {
		case h.DeadLettered && h.Acked:
			line += fmt.Sprintf(", dead-lettered after %d deliveries and acked", h.Deliveries)
		case h.Acked:
			line += ", acked"
		case skipAck && (h.Outcome == pipeline.Applied || h.Outcome == pipeline.Duplicate):
			line += ", skip_ack: crashed before " + ack + ", not acked"
		case h.Nacked:
			line += ", nacked: given back for redelivery (on Redis Streams it stays pending)"
		default:
			line += ", not acked: stays pending"
		}
		if h.Reason != "" {
			line += " — " + h.Reason
		}
		if h.Outcome == pipeline.Conflict {
			state := "not acked"
			if h.DeadLettered {
				state = "dead-lettered and acked"
			}
			r.Alerts = append(r.Alerts, h.Reason+" (entry "+h.ID+", "+state+")")
		}
		r.Details = append(r.Details, line)
	}
	for _, n := range res.Notes {
		r.Details = append(r.Details, "broker: "+n)
	}
	return r
}

// Consumes: the consumer id the step reads as and the read model it writes.
func (h *Handling) Consumes() Consumption {
	return Consumption{Consumer: h.Consumer, Model: h.Project}
}

// Needs: dedupe by SETNX needs the broker's side store.
func (h *Handling) Needs() []broker.Capability {
	var needs []broker.Capability
	if h.Dedupe == "setnx" {
		needs = append(needs, broker.SideStore)
	}
	if h.MaxDeliv > 0 { // a dead-letter limit counts the broker's deliveries
		needs = append(needs, broker.DeliveryCount)
	}
	return needs
}

func (*Handling) FaultSite() Participant { return ConsumerDB }

func (*ConsumeParams) Draw(d Diagram, r Result) { drawDeliveries(d, r.verbsOr().Read, r) }

func (p *ClaimParams) Consumes() Consumption {
	c := p.Handling.Consumes()
	c.TakesOver = true
	return c
}

// Needs: a real idle time or XAUTOCLAIM needs the broker to track idleness.
func (p *ClaimParams) Needs() []broker.Capability {
	needs := p.Handling.Needs()
	if p.Idle > 0 || p.Auto {
		needs = append(needs, broker.ClaimByIdle)
	}
	return needs
}

func (*ClaimParams) Draw(d Diagram, r Result) { drawDeliveries(d, r.verbsOr().Claim, r) }

// drawDeliveries draws each delivery: the entry handed over, its outcome,
// a dead-lettering and the ack.
func drawDeliveries(d Diagram, verb string, r Result) {
	for _, e := range r.Entries {
		d.Msg(BrokerP, ConsumerDB, "->>", fmt.Sprintf("%s %s (%s)", verb, e.EntryID, e.EventID))
		d.Note(e.Outcome, ConsumerDB)
		if e.DeadLettered {
			d.Note("to the dead-letter stream: "+e.EventID, BrokerP)
		}
		if e.Acked {
			d.Msg(ConsumerDB, BrokerP, "-->>", r.verbsOr().Ack+" "+e.EntryID)
		}
	}
	if len(r.Entries) == 0 {
		d.Note(verb+": nothing delivered", BrokerP)
	}
}
