package steps

import (
	"context"
	"fmt"
	"time"

	"outboxdrill/broker"
	"outboxdrill/pipeline"
)

const expectStep = "expect"

var consumeOutcomes = []Key{
	{"delivered", "entries handed to this worker"},
	{"applied", "new in the inbox; projection updated"},
	{"duplicate", "same event id and payload already in the inbox: no effect, acked"},
	{"conflict", "same event id, different payload: identity conflict, no effect, not acked (unless dead-lettered)"},
	{"failed", "the consumer transaction rolled back: the entry stays pending (unless dead-lettered)"},
	{"acked", "entries XACKed after their commit, and dead-lettered ones (with mode: ack_first every entry, before its transaction)"},
	{"dead_lettered", "entries moved to the dead-letter stream (with max_deliveries); each also counts under its own outcome, failed or conflict, and (without skip_ack) as acked"},
	{"deferred", "entries held back by strict ordering: no effect, not acked"},
	{"redelivered", "entries this worker got that the broker had delivered before (a reclaim, a redelivery after AckWait, RabbitMQ's Redelivered after a channel loss)"},
}

// ProduceParams are the parameters of the produce step.
type ProduceParams struct {
	Event    string `param:"event" doc:"business event id; default the first of bus-1, bus-2, … not yet used in this scenario (a produce that rolled back has used its id too)"`
	Amount   int64  `param:"amount" default:"100" min:"1" doc:"atomic units moved"`
	Currency string `param:"currency" default:"USD" doc:"currency of the amount"`
	From     string `param:"from" default:"alice" doc:"account debited"`
	To       string `param:"to" default:"bob" doc:"account credited"`
	Fail     string `param:"fail" fault:"yes" enum:"divzero" doc:"divzero: SELECT 1/0 after the outbox insert, inside the producer transaction"`
	Agg      string `param:"aggregate" doc:"orders this event within an aggregate: the producer gives it the aggregate's next version (1, 2, …) in the same transaction"`
}

func (p *ProduceParams) validate() error {
	if p.From == p.To {
		return fmt.Errorf("from and to are both %q: a transfer needs two accounts", p.From)
	}
	return nil
}

// RelayParams are the parameters of the relay step.
type RelayParams struct {
	Limit    int    `param:"limit" min:"1" doc:"rows to relay (per relay); default all unpublished rows"`
	SkipMark bool   `param:"skip_mark" fault:"yes" doc:"fault: XADD, then crash before marking the rows published"`
	Workers  int    `param:"workers" default:"1" min:"1" doc:"relays running at once (at most 4); all read before any publishes, so their race is deterministic"`
	Lease    string `param:"lease" default:"skip_locked" enum:"skip_locked|flag" doc:"how concurrent relays claim rows: FOR UPDATE SKIP LOCKED, or the anti-pattern of published=true as the only claim"`
	Mode     string `param:"mode" default:"publish_first" enum:"publish_first|mark_first" doc:"mark_first is the anti-pattern: mark the rows published, then XADD"`
	SkipPub  bool   `param:"skip_publish" fault:"yes" doc:"fault with mode mark_first: crash after marking, before XADD (the events are lost)"`
}

func (p *RelayParams) validate() error {
	markFirst := p.Mode == "mark_first"
	switch {
	case p.SkipPub && !markFirst:
		return fmt.Errorf("skip_publish is the crash window of mode: mark_first")
	case p.SkipMark && markFirst:
		return fmt.Errorf("skip_mark is the crash window of mode: publish_first; mark_first has skip_publish")
	case p.Workers > 1 && markFirst:
		return fmt.Errorf("mode: mark_first runs as one relay (workers: 1)")
	case p.Workers > maxRelays:
		return fmt.Errorf("workers: at most %d relays at once, got %d", maxRelays, p.Workers)
	case p.Workers > 1 && p.SkipMark:
		return fmt.Errorf("skip_mark is a fault of one relay: use it with workers: 1")
	}
	return nil
}

// maxRelays stays below the scenario's connection pool (4 per database):
// each concurrent relay holds a connection across the barrier.
const maxRelays = 4

// PublishParams are the parameters of the publish step.
type PublishParams struct {
	Event    *string `param:"event" doc:"business event id; default the last event produce committed (bus-1 before any)"`
	Amount   *int64  `param:"amount" min:"1" doc:"default: as produced for this event, else 100"`
	Currency *string `param:"currency" doc:"default: as produced for this event, else USD"`
	From     *string `param:"from" doc:"default: as produced for this event, else alice"`
	To       *string `param:"to" doc:"default: as produced for this event, else bob"`
}

// ConsumeParams are the parameters of the consume step.
type ConsumeParams struct {
	Handling
	Worker string        `param:"worker" default:"worker-1" doc:"worker id: a process instance, never a dedupe key"`
	Count  int           `param:"count" min:"1" doc:"entries to take; default all new entries"`
	Block  time.Duration `param:"block" default:"50ms" doc:"how long to wait when no entry is new (never forever)"`
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
	Consumer string `param:"consumer" default:"accounting" doc:"consumer id: the group and the inbox dedupe scope"`
	Project  string `param:"projection" doc:"read model the consumer updates; default its consumer id. Naming another consumer's read model is the renamed-consumer anti-pattern"`
	Fail     string `param:"fail" fault:"yes" enum:"divzero" doc:"divzero: SELECT 1/0 after the inbox insert, inside the consumer transaction"`
	SkipAck  bool   `param:"skip_ack" fault:"yes" doc:"fault: commit, then crash before XACK"`
	MaxDeliv int    `param:"max_deliveries" min:"1" doc:"an entry that failed or conflicted on its N-th delivery goes to the dead-letter stream and is acked"`
	Mode     string `param:"mode" default:"one_tx" enum:"one_tx|ack_first|split_tx" doc:"anti-patterns: ack_first XACKs before the transaction; split_tx commits inbox and projection separately (a fault strikes between)"`
	Dedupe   string `param:"dedupe" default:"event_id" enum:"event_id|entry_id|setnx" doc:"anti-patterns: entry_id dedupes by broker entry id; setnx dedupes with Redis SETNX before the PostgreSQL transaction"`
	Ordering string `param:"ordering" default:"none" enum:"none|strict" doc:"strict: apply an aggregate's events in version order; a later one is held back (deferred, not acked) until its predecessor is applied"`
}

// options turns the shared parameters into the pipeline's options.
func (h Handling) options(env *Env, worker string, count int) pipeline.ConsumeOptions {
	return pipeline.ConsumeOptions{
		Consumer: h.Consumer, Projection: h.Project, Worker: worker, Count: count,
		Fault: pipeline.Fault(h.Fail), SkipAck: h.SkipAck, MaxDeliveries: h.MaxDeliv,
		AckFirst: h.Mode == "ack_first", SplitTx: h.Mode == "split_tx", DedupeByEntry: h.Dedupe == "entry_id",
		Seen: seenStore(env, h.Dedupe), Strict: h.Ordering == "strict",
	}
}

// PurgeParams are the parameters of the inbox.purge step.
type PurgeParams struct {
	Consumer string `param:"consumer" default:"accounting" doc:"consumer id whose inbox rows are deleted"`
}

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

func (p *ProcessParams) validate() error {
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

func (p *BrokerParams) validate() error {
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

// ReconcileParams are the parameters of the reconcile step.
type ReconcileParams struct {
	Consumer string `param:"consumer" default:"accounting" doc:"consumer id whose applied events are compared with the outbox"`
}

// ReplayDLQParams are the parameters of the replay_dlq step (none).
type ReplayDLQParams struct{}

// SleepParams are the parameters of the sleep step.
type SleepParams struct {
	For time.Duration `param:"for" doc:"how long; time passes for real (idle times grow, within: waits)"`
}

func (p *SleepParams) validate() error {
	if p.For <= 0 {
		return fmt.Errorf("sleep needs a duration, e.g. sleep(for=500ms)")
	}
	return nil
}

type ExpectParams struct{}

func init() {
	define("produce", "Commit one transfer in ONE producer transaction: journal row, debit and credit ledger entries, balances and the outbox row.",
		[]Key{{"committed", "1 if the transaction committed"}, {"failed", "1 if the injected fault rolled it back"}},
		runProduce)
	define("relay", "Publish unpublished outbox rows in order (one XADD each, fields event_id and payload), then mark them published.",
		[]Key{{"published", "entries XADDed (with workers: N, summed over the relays)"}, {"marked", "outbox rows marked published (with workers: N, summed over the relays)"}},
		runRelay)
	define("publish", "XADD a raw entry, bypassing the outbox: a replayed or forged delivery. The payload is built exactly as produce builds it, so the same values make a duplicate and another amount an identity conflict.",
		[]Key{{"published", "entries XADDed (1)"}},
		runPublish)
	define("consume", "XREADGROUP new entries ('>') as worker of the consumer's group (created on first use from the stream's start), then per entry ONE consumer transaction: insert into the inbox; if new, update the projection; commit; then XACK.",
		consumeOutcomes, runConsume)
	define("claim", "Take over pending entries idle at least `idle` (XPENDING + XCLAIM) and handle them exactly as consume does.",
		consumeOutcomes, runClaim)
	define("replay_dlq", "Publish every dead-lettered entry again on the main stream with its SAME event id and payload, and empty the dead-letter stream: the inbox still dedupes.",
		[]Key{{"replayed", "entries published again"}}, runReplayDLQ)
	define("inbox.purge", "Delete a consumer's inbox rows, as a clean-up job would. Before the broker's retention and replay windows have passed this is an anti-pattern: a replay is then applied again.",
		[]Key{{"purged", "inbox rows deleted"}}, runPurge)
	define("broker", "Act on the broker itself. trim: drop all but the newest N entries — published events the broker no longer holds.",
		[]Key{{"trimmed", "entries dropped"}}, runBroker)
	define("producer_db", "Act on the producer's PostgreSQL server process (kill, stop, start, restart). After kill + start the server runs crash recovery: what was committed is there, what was not is gone. Skipped on a server given with --pg.",
		nil, runPostgres("producer"))
	define("consumer_db", "Act on the consumer's PostgreSQL server process (kill, stop, start, restart), a server of its own: the producer's keeps running. Skipped on a server given with --pg.",
		nil, runPostgres("consumer"))
	define("reconcile", "Compare the outbox's published events with what the consumer has applied (its inbox) and republish the missing ones with their ORIGINAL event ids and payloads.",
		[]Key{{"republished", "events published again"}}, runReconcile)
	define("sleep", "Let real time pass: pending entries grow idle, a worker that stopped looks dead. Cancelled by the scenario timeout.",
		nil, runSleep)
	define(expectStep, "Check the state of the databases and the stream. Its map holds state checks (see below).",
		nil, func(context.Context, *Env, *ExpectParams) (Result, error) { return Result{}, nil })
}

func runProduce(ctx context.Context, env *Env, p *ProduceParams) (Result, error) {
	t := pipeline.Transfer{EventID: p.Event, From: p.From, To: p.To, Amount: p.Amount, Currency: p.Currency, Aggregate: p.Agg}
	if t.EventID == "" {
		t.EventID = env.nextAutoID()
	}
	env.used[t.EventID] = true
	res, err := (&pipeline.Producer{DB: env.Producer}).Produce(ctx, t, pipeline.Fault(p.Fail))
	if err != nil {
		return Result{}, err
	}
	r := Result{Outcome: map[string]int64{"committed": b2i(res.Committed), "failed": b2i(res.Failed)}}
	t = res.Transfer // with its version
	if res.Committed {
		env.transfers[t.EventID] = t
		env.last = t.EventID
		r.Entries = append(r.Entries, Entry{EventID: t.EventID, Outcome: "committed", Payload: t.Payload()})
		line := fmt.Sprintf("committed %s: %d %s %s → %s", t.EventID, t.Amount, t.Currency, t.From, t.To)
		if t.Aggregate != "" {
			line += fmt.Sprintf(", aggregate %s version %d", t.Aggregate, t.Version)
		}
		r.Details = append(r.Details, line)
	} else {
		r.Details = append(r.Details, fmt.Sprintf("%s: %s", t.EventID, res.Reason))
	}
	return r, nil
}

func runRelay(ctx context.Context, env *Env, p *RelayParams) (Result, error) {
	relay := &pipeline.Relay{DB: env.Producer, Broker: env.Broker}
	var results []pipeline.RelayResult
	var err error
	if p.Workers > 1 {
		results, err = relay.RelayConcurrently(ctx, p.Workers, pipeline.Lease(p.Lease), p.Limit)
	} else {
		var res pipeline.RelayResult
		res, err = relay.Relay(ctx, pipeline.RelayOptions{Limit: p.Limit, SkipMark: p.SkipMark, MarkFirst: p.Mode == "mark_first", SkipPublish: p.SkipPub})
		results = []pipeline.RelayResult{res}
	}
	r := Result{Outcome: map[string]int64{"published": 0, "marked": 0}}
	for w, res := range results {
		r.Outcome["published"] += int64(len(res.Published))
		r.Outcome["marked"] += int64(res.Marked)
		for _, pub := range res.Published {
			line := fmt.Sprintf("XADD %s → entry %s", pub.EventID, pub.EntryID)
			if len(results) > 1 {
				line = fmt.Sprintf("relay %d: %s", w+1, line)
			}
			r.Details = append(r.Details, line)
			r.Entries = append(r.Entries, Entry{EntryID: pub.EntryID, EventID: pub.EventID, Outcome: "published", Payload: pub.Payload})
		}
	}
	if p.SkipMark && r.Outcome["published"] > 0 {
		r.Details = append(r.Details, "skip_mark: crashed before marking; the rows stay unpublished")
	}
	if p.SkipPub && r.Outcome["marked"] > 0 {
		r.Details = append(r.Details, "mark_first + skip_publish: marked published, crashed before XADD; no relay will read these rows again")
	}
	return r, err
}

func runPublish(ctx context.Context, env *Env, p *PublishParams) (Result, error) {
	event := env.last
	if event == "" {
		event = "bus-1"
	}
	event = deref(p.Event, event)
	t, ok := env.transfers[event]
	if !ok {
		t = pipeline.Transfer{EventID: event, From: "alice", To: "bob", Amount: 100, Currency: "USD"}
	}
	t.Amount, t.Currency = deref(p.Amount, t.Amount), deref(p.Currency, t.Currency)
	t.From, t.To = deref(p.From, t.From), deref(p.To, t.To)
	ids, err := env.Broker.Publish(ctx, []broker.Message{{EventID: t.EventID, Payload: t.Payload(), Republish: true}})
	r := Result{Outcome: map[string]int64{"published": int64(len(ids))}}
	for _, id := range ids {
		r.Details = append(r.Details, fmt.Sprintf("XADD %s → entry %s, payload %s", t.EventID, id, t.Payload()))
		r.Entries = append(r.Entries, Entry{EntryID: id, EventID: t.EventID, Outcome: "published", Payload: t.Payload()})
	}
	return r, err
}

func runConsume(ctx context.Context, env *Env, p *ConsumeParams) (Result, error) {
	opt := p.options(env, p.Worker, p.Count)
	opt.Block = p.Block
	res, err := (&pipeline.Consumer{DB: env.Consumer, Broker: env.Broker}).Consume(ctx, opt)
	env.conflicts += int64(res.Count(pipeline.Conflict))
	return consumeResult(res, p.Consumer, p.SkipAck), err
}

func runClaim(ctx context.Context, env *Env, p *ClaimParams) (Result, error) {
	opt := p.options(env, p.Worker, p.Count)
	opt.Idle, opt.Auto = p.Idle, p.Auto
	res, err := (&pipeline.Consumer{DB: env.Consumer, Broker: env.Broker}).Claim(ctx, opt)
	env.conflicts += int64(res.Count(pipeline.Conflict))
	return consumeResult(res, p.Consumer, p.SkipAck), err
}

func runReplayDLQ(ctx context.Context, env *Env, _ *ReplayDLQParams) (Result, error) {
	dls, err := env.Broker.TakeDeadLetters(ctx)
	if err != nil {
		return Result{}, err
	}
	msgs := make([]broker.Message, len(dls))
	for i, dl := range dls {
		msgs[i] = broker.Message{EventID: dl.EventID, Payload: dl.Payload, Republish: true}
	}
	ids, err := env.Broker.Publish(ctx, msgs)
	r := Result{Outcome: map[string]int64{"replayed": int64(len(ids))}}
	for i, id := range ids {
		r.Details = append(r.Details, fmt.Sprintf("XADD %s → entry %s (was %s, dead-lettered: %s)", dls[i].EventID, id, dls[i].EntryID, dls[i].Reason))
		r.Entries = append(r.Entries, Entry{EntryID: id, EventID: dls[i].EventID, Outcome: "published", Payload: dls[i].Payload})
	}
	return r, err
}

// seenStore is the broker's SETNX store when dedupe is setnx.
func seenStore(env *Env, dedupe string) pipeline.SeenStore {
	if s, ok := env.Broker.(pipeline.SeenStore); ok && dedupe == "setnx" {
		return s
	}
	return nil
}

// cannot is the skip of a process fault the runner cannot apply here.
func cannot(env *Env, step, action string) error {
	why := "the runner controls no server process here"
	if env.Control != nil {
		why = env.Control.Cannot(step)
	}
	if why == "" {
		return nil
	}
	return &SkipError{Reason: fmt.Sprintf("%s(%s): %s", step, action, why)}
}

func runBroker(ctx context.Context, env *Env, p *BrokerParams) (Result, error) {
	if a := p.Action(); a != "" {
		if err := cannot(env, "broker", a); err != nil {
			return Result{}, err
		}
		if err := env.Control.Broker(ctx, a); err != nil {
			return Result{}, err
		}
		return Result{Details: []string{"broker " + a}}, nil
	}
	n, err := env.Broker.Trim(ctx, *p.Trim)
	return Result{Outcome: map[string]int64{"trimmed": n}, Details: []string{fmt.Sprintf("XTRIM MAXLEN %d: %d entries dropped", *p.Trim, n)}}, err
}

// runPostgres is the producer_db and consumer_db steps.
func runPostgres(side string) func(context.Context, *Env, *ProcessParams) (Result, error) {
	step := side + "_db"
	return func(ctx context.Context, env *Env, p *ProcessParams) (Result, error) {
		a := p.Action()
		if err := cannot(env, step, a); err != nil {
			return Result{}, err
		}
		if err := env.Control.Postgres(ctx, side, a); err != nil {
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
}

func runReconcile(ctx context.Context, env *Env, p *ReconcileParams) (Result, error) {
	relay := &pipeline.Relay{DB: env.Producer, Broker: env.Broker}
	res, err := relay.Reconcile(ctx, env.Consumer, p.Consumer)
	r := Result{Outcome: map[string]int64{"republished": int64(len(res.Published))}}
	for _, pub := range res.Published {
		r.Details = append(r.Details, fmt.Sprintf("XADD %s → entry %s (not applied by %s)", pub.EventID, pub.EntryID, p.Consumer))
		r.Entries = append(r.Entries, Entry{EntryID: pub.EntryID, EventID: pub.EventID, Outcome: "published", Payload: pub.Payload})
	}
	return r, err
}

func runPurge(ctx context.Context, env *Env, p *PurgeParams) (Result, error) {
	tag, err := env.Consumer.Exec(ctx, `DELETE FROM inbox WHERE consumer_id = $1`, p.Consumer)
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: map[string]int64{"purged": tag.RowsAffected()},
		Entries: []Entry{{Outcome: "purged", Consumer: p.Consumer}}}, nil
}

func runSleep(ctx context.Context, _ *Env, p *SleepParams) (Result, error) {
	t := time.NewTimer(p.For)
	defer t.Stop()
	select {
	case <-t.C:
		return Result{Details: []string{"slept " + p.For.String()}}, nil
	case <-ctx.Done():
		return Result{}, context.Cause(ctx)
	}
}

func consumeResult(res pipeline.ConsumeResult, consumer string, skipAck bool) Result {
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
		r.Entries = append(r.Entries, Entry{EntryID: h.ID, EventID: h.EventID, Outcome: string(h.Outcome), Consumer: consumer, Payload: h.Payload, Acked: h.Acked, DeadLettered: h.DeadLettered})
		line := fmt.Sprintf("entry %s (%s): %s", h.ID, h.EventID, h.Outcome)
		switch {
		case h.DeadLettered && h.Acked:
			line += fmt.Sprintf(", dead-lettered after %d deliveries and acked", h.Deliveries)
		case h.Acked:
			line += ", acked"
		case skipAck && (h.Outcome == pipeline.Applied || h.Outcome == pipeline.Duplicate):
			line += ", skip_ack: crashed before XACK, stays pending"
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
	return r
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
