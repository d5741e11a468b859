package steps

import (
	"context"
	"fmt"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/pipeline"
)

// PurgeParams are the parameters of the inbox.purge step.
type PurgeParams struct {
	Consumer string `param:"consumer" default:"accounting" doc:"consumer id whose inbox rows are deleted"`
}

// ReconcileParams are the parameters of the reconcile step.
type ReconcileParams struct {
	Consumer string `param:"consumer" default:"accounting" doc:"consumer id whose applied events are compared with the outbox"`
}

// ReplayDLQParams are the parameters of the replay_dlq step (none).
type ReplayDLQParams struct{}

func recoveryDefs() []*Def {
	return []*Def{
		Define("replay_dlq", "Publish every dead-lettered entry again on the main stream with its SAME event id and payload, and empty the dead-letter stream: the inbox still dedupes.",
			[]Key{{"replayed", "entries published again"}}, runReplayDLQ),
		Define("inbox.purge", "Delete a consumer's inbox rows, as a clean-up job would. Before the broker's retention and replay windows have passed this is an anti-pattern: a replay is then applied again.",
			[]Key{{"purged", "inbox rows deleted"}}, runPurge),
		Define("reconcile", "Compare the outbox's published events with what the consumer has applied (its inbox) and republish the missing ones with their ORIGINAL event ids and payloads.",
			[]Key{{"republished", "events published again"}}, runReconcile),
	}
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
		r.Details = append(r.Details, fmt.Sprintf("%s %s → entry %s (was %s, dead-lettered: %s)", verbs(env).Publish, dls[i].EventID, id, dls[i].EntryID, dls[i].Reason))
		r.Entries = append(r.Entries, Entry{EntryID: id, EventID: dls[i].EventID, Outcome: "published", Payload: dls[i].Payload, Republish: true})
	}
	return r, err
}

func runReconcile(ctx context.Context, env *Env, p *ReconcileParams) (Result, error) {
	relay := &pipeline.Relay{DB: env.Producer, Broker: env.Broker}
	var pending map[string]bool
	if env.CDC != nil { // the CDC relay: still in the slot means not published yet
		evs, err := env.CDC.Pending(ctx)
		if err != nil {
			return Result{}, err
		}
		pending = map[string]bool{}
		for _, ev := range evs {
			pending[ev.EventID] = true
		}
	}
	res, err := relay.Reconcile(ctx, env.Consumer, p.Consumer, pending)
	r := Result{Outcome: map[string]int64{"republished": int64(len(res.Published))}}
	for _, pub := range res.Published {
		r.Details = append(r.Details, fmt.Sprintf("%s %s → entry %s (not applied by %s)", verbs(env).Publish, pub.EventID, pub.EntryID, p.Consumer))
		r.Entries = append(r.Entries, Entry{EntryID: pub.EntryID, EventID: pub.EventID, Outcome: "published", Payload: pub.Payload, Republish: true})
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

func (*ReplayDLQParams) FaultSite() Participant { return BrokerP }

func (*ReplayDLQParams) Draw(d Diagram, r Result) {
	drawPublished(d, "replay from the dead-letter stream, "+r.verbsOr().Publish, r)
}

func (*ReconcileParams) FaultSite() Participant { return RelayP }

func (p *ReconcileParams) Draw(d Diagram, r Result) {
	d.Msg(RelayP, ConsumerDB, "->>", "which published events has "+p.Consumer+" not applied?")
	for _, e := range r.Entries {
		d.Msg(RelayP, BrokerP, "->>", fmt.Sprintf("%s %s → %s (republished)", r.verbsOr().Publish, e.EventID, e.EntryID))
	}
}

func (*PurgeParams) FaultSite() Participant { return ConsumerDB }

func (p *PurgeParams) Draw(d Diagram, r Result) {
	d.Note(fmt.Sprintf("purge %s's inbox: %d row(s) deleted", p.Consumer, r.Outcome["purged"]), ConsumerDB)
}
