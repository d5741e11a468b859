package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/pipeline"
)

// RelayParams are the parameters of the relay step. Workers stays within
// the scenario's connection pool (4 per database): each concurrent relay
// holds a connection across the barrier.
type RelayParams struct {
	Limit    int    `param:"limit" min:"1" doc:"rows to relay (per relay); default all unpublished rows"`
	SkipMark bool   `param:"skip_mark" fault:"yes" doc:"fault: XADD, then crash before marking the rows published"`
	Workers  int    `param:"workers" default:"1" min:"1" max:"4" doc:"relays running at once; all read before any publishes, so their race is deterministic"`
	Lease    string `param:"lease" default:"skip_locked" enum:"skip_locked|flag" doc:"how concurrent relays claim rows: FOR UPDATE SKIP LOCKED, or the anti-pattern of published=true as the only claim"`
	Mode     string `param:"mode" default:"publish_first" enum:"publish_first|mark_first|cdc|cdc_confirm_first" doc:"publish_first polls the outbox, publishes, then marks; mark_first is the anti-pattern: mark the rows published, then XADD. cdc reads committed outbox inserts from the scenario's logical replication slot (pgoutput), publishes each transaction's events and confirms its LSN after the broker's ack; cdc_confirm_first is the anti-pattern: confirm the LSN, then publish"`
	SkipPub  bool   `param:"skip_publish" fault:"yes" doc:"fault: crash before publishing. With mode mark_first after marking (the events are lost); with cdc before confirming (nothing is lost: the slot keeps them); with cdc_confirm_first after confirming (lost)"`
	SkipConf bool   `param:"skip_confirm" fault:"yes" doc:"fault with mode cdc: publish, then crash before confirming the LSN (the next pass publishes again)"`
	Conn     string `param:"connection" default:"reconnect" enum:"reconnect|keep" doc:"the cdc relay's replication connection. reconnect: the pass connects, streams from the slot's confirmed LSN and disconnects, a relay restarted for each pass (the slot is free between passes: metrics.cdc_slot_active 0); keep: the connection an earlier keep pass left open streams on, as a running connector's does, and stays attached after (a reconnect pass or slot: drop stops it). A fault is a crash in both: the connection closes, the next pass starts from the confirmed LSN"`
}

// UsesCDC reports whether the step reads the replication slot.
func (p *RelayParams) UsesCDC() bool { return strings.HasPrefix(p.Mode, "cdc") }

func (p *RelayParams) Validate() error {
	markFirst := p.Mode == "mark_first"
	switch {
	case p.UsesCDC() && (p.Workers > 1 || p.SkipMark || p.Limit > 0 || p.Lease != "skip_locked"):
		return fmt.Errorf("mode: %s is one relay on the replication slot: workers, limit, lease and skip_mark are the polling relay's", p.Mode)
	case p.Conn == "keep" && !p.UsesCDC():
		return ParamErrorf("connection", "connection: keep is the cdc relay's replication connection; mode %s polls the outbox", p.Mode)
	case p.SkipConf && p.Mode != "cdc":
		return fmt.Errorf("skip_confirm is the crash window of mode: cdc (publish, then crash before confirming)")
	case p.SkipConf && p.SkipPub:
		return fmt.Errorf("skip_confirm and skip_publish are two crashes: the pass dies at the first")
	case p.SkipPub && !markFirst && !p.UsesCDC():
		return fmt.Errorf("skip_publish is the crash window of mode: mark_first, cdc or cdc_confirm_first")
	case p.SkipMark && markFirst:
		return fmt.Errorf("skip_mark is the crash window of mode: publish_first; mark_first has skip_publish")
	case p.Workers > 1 && markFirst:
		return fmt.Errorf("mode: mark_first runs as one relay (workers: 1)")
	case p.Workers > 1 && p.SkipMark:
		return fmt.Errorf("skip_mark is a fault of one relay: use it with workers: 1")
	}
	return nil
}

func relayDefs() []*Def {
	return []*Def{
		Define("relay", "Publish unpublished outbox rows in order (one XADD each, fields event_id and payload), then mark them published. While the scenario has the broker stopped or killed (broker(stop|kill)), a relay whose publish fails (every worker's, with workers: N) ends with that as its outcome, not an error of the scenario: published: 0; publish_first and cdc mark nothing and the rows stay unpublished (fails cleanly); mark_first and cdc_confirm_first marked or confirmed first, and the trace says those rows are lost. expect: {error: ...} may still name the failure.",
			[]Key{{"published", "entries XADDed (with workers: N, summed over the relays)"}, {"marked", "outbox rows marked published (with workers: N, summed over the relays; 0 with mode cdc, which marks nothing)"},
				{"confirmed", "events whose commit LSN the cdc relay confirmed to the replication slot (0 for the polling relay)"}},
			runRelay),
	}
}

func runRelay(ctx context.Context, env *Env, p *RelayParams) (Result, error) {
	if p.UsesCDC() {
		return runCDCRelay(ctx, env, p)
	}
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
	r := Result{Outcome: map[string]int64{"published": 0, "marked": 0, "confirmed": 0}}
	for w, res := range results {
		r.Outcome["published"] += int64(len(res.Published))
		r.Outcome["marked"] += int64(res.Marked)
		for _, pub := range res.Published {
			line := fmt.Sprintf("%s %s → entry %s", verbs(env).Publish, pub.EventID, pub.EntryID)
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
		r.Details = append(r.Details, "mark_first + skip_publish: marked published, crashed before "+verbs(env).Publish+"; no relay will read these rows again")
	}
	return r, downFailure(env, p, err)
}

// downFailure: a relay facing the broker the scenario stopped or killed
// fails cleanly: it published nothing more, and its outcome says so — an
// outcome of the fault, not the scenario's error (expect: {error: ...}
// still sees it as the step's error). Only when every relay's error was
// its publish (concurrent relays' errors are joined): any other error is
// the step's. The relays that publish first marked nothing more, their
// rows wait; the anti-patterns marked or confirmed first, and the outcome
// says those rows are lost — the history checker judges that damage.
func downFailure(env *Env, p *RelayParams, err error) error {
	if err == nil || !env.brokerDown || !onlyPublish(err) {
		return err
	}
	detail := "failed cleanly (the broker is down: the rows stay unpublished)"
	switch p.Mode {
	case "mark_first":
		detail = "failed after marking (the broker is down: mark_first marked the rows before publishing; no relay reads them again)"
	case "cdc_confirm_first":
		detail = "failed after confirming (the broker is down: cdc_confirm_first confirmed the slot past these events before publishing; no relay decodes them again)"
	}
	return &OutcomeError{Err: err, Detail: detail}
}

// onlyPublish reports whether err is a failed publish; of concurrent
// relays, whether each failed pass's is.
func onlyPublish(err error) bool {
	var ws pipeline.WorkerErrors
	if errors.As(err, &ws) {
		for _, e := range ws {
			if !errors.Is(e, broker.ErrPublish) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, broker.ErrPublish)
}

func (*RelayParams) FaultSite() Participant { return RelayP }

func (*RelayParams) Draw(d Diagram, r Result) {
	d.Msg(RelayP, ProducerDB, "->>", "SELECT unpublished outbox rows")
	for _, e := range r.Entries {
		d.Msg(RelayP, BrokerP, "->>", fmt.Sprintf("%s %s → %s", r.verbsOr().Publish, e.EventID, e.EntryID))
	}
	if n := r.Outcome["marked"]; n > 0 {
		d.Msg(RelayP, ProducerDB, "->>", fmt.Sprintf("mark %d row(s) published", n))
	}
}

// runCDCRelay is one pass of the log-based relay on the scenario's slot.
func runCDCRelay(ctx context.Context, env *Env, p *RelayParams) (Result, error) {
	if env.CDC == nil {
		return Result{}, fmt.Errorf("mode: %s needs the scenario's replication slot, and this scenario has none", p.Mode)
	}
	keep, reused := p.Conn == "keep", env.CDC.Connected()
	res, err := env.CDC.Relay(ctx, env.Broker, cdc.RelayOptions{SkipConfirm: p.SkipConf, SkipPublish: p.SkipPub, ConfirmFirst: p.Mode == "cdc_confirm_first", Keep: keep})
	r := Result{Outcome: map[string]int64{"published": int64(len(res.Published)), "marked": 0, "confirmed": int64(res.Settled)}}
	r.Details = append(r.Details, cdcConnection(keep, reused, res.Opened, env.CDC.Connected()))
	r.Details = append(r.Details, fmt.Sprintf("decoded %d outbox insert(s) from slot %s", res.Decoded, env.CDC.Name))
	for _, pub := range res.Published {
		r.Details = append(r.Details, fmt.Sprintf("%s %s → entry %s", verbs(env).Publish, pub.EventID, pub.EntryID))
		r.Entries = append(r.Entries, Entry{EntryID: pub.EntryID, EventID: pub.EventID, Outcome: "published", Payload: pub.Payload})
	}
	switch {
	case res.Confirmed > 0:
		r.Details = append(r.Details, "confirmed LSN "+res.Confirmed.String())
	case res.Decoded > 0:
		r.Details = append(r.Details, "confirmed nothing: the slot still holds these events")
	}
	if res.Crashed {
		r.Details = append(r.Details, "crashed: "+cdcCrash(p))
	}
	return r, downFailure(env, p, err)
}

// cdcConnection says how the pass held its replication connection: kept
// from an earlier pass (reused), opened by this one, open after it.
func cdcConnection(keep, reused, opened, open bool) string {
	var how string
	switch {
	case !keep && reused:
		return "stopped the relay that kept its connection; connected for this pass, disconnected after"
	case !keep:
		return "connected for this pass, disconnected after"
	case reused && opened:
		how = "the kept connection was gone (the server ended it): connected again"
	case reused:
		how = "streamed on the kept connection"
	default:
		how = "connected"
	}
	if open {
		return how + "; the connection stays attached to the slot"
	}
	return how + "; the connection closed with the pass"
}

func cdcCrash(p *RelayParams) string {
	switch {
	case p.SkipConf:
		return "skip_confirm: published, then died before confirming the LSN; the next pass publishes again"
	case p.Mode == "cdc_confirm_first":
		return "confirmed the LSN, then died before publishing: the slot has moved past these events, no pass will read them again"
	}
	return "skip_publish: died before publishing; nothing was confirmed, the slot keeps the events"
}
