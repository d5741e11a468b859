package steps

import (
	"context"
	"fmt"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/pipeline"
)

// PublishParams are the parameters of the publish step.
type PublishParams struct {
	Event    *string `param:"event" doc:"business event id; default the last event produce committed (bus-1 before any). On a team's system whose outbox event_id column is uuid or an integer, the name maps to an id of that type, as produce's does"`
	Amount   *int64  `param:"amount" min:"1" doc:"default: as produced for this event, else 100"`
	Currency *string `param:"currency" doc:"default: as produced for this event, else USD"`
	From     *string `param:"from" doc:"default: as produced for this event, else alice"`
	To       *string `param:"to" doc:"default: as produced for this event, else bob"`
}

func publishDefs() []*Def {
	return []*Def{
		Define("publish", "XADD a raw entry, bypassing the outbox: a replayed or forged delivery. The payload is built exactly as produce builds it, so the same values make a duplicate and another amount an identity conflict.",
			[]Key{{"published", "entries XADDed (1)"}},
			runPublish),
	}
}

func runPublish(ctx context.Context, env *Env, p *PublishParams) (Result, error) {
	name := env.last
	if name == "" {
		name = "bus-1"
	}
	name = deref(p.Event, name)
	t, ok := env.transfers[name]
	if !ok {
		id, err := env.eventID(name)
		if err != nil {
			return Result{}, err
		}
		t = pipeline.Transfer{EventID: id, From: "alice", To: "bob", Amount: 100, Currency: "USD"}
	}
	t.Amount, t.Currency = deref(p.Amount, t.Amount), deref(p.Currency, t.Currency)
	t.From, t.To = deref(p.From, t.From), deref(p.To, t.To)
	payload, err := env.payload(t)
	if err != nil {
		return Result{}, err
	}
	ids, err := env.Broker.Publish(ctx, []broker.Message{{EventID: t.EventID, Payload: payload, Republish: true}})
	r := Result{Outcome: map[string]int64{"published": int64(len(ids))}}
	for _, id := range ids {
		r.Details = append(r.Details, fmt.Sprintf("%s %s → entry %s, payload %s", verbs(env).Publish, showEvent(name, t.EventID), id, payload))
		r.Entries = append(r.Entries, Entry{EntryID: id, EventID: t.EventID, Outcome: "published", Payload: payload, Republish: true})
	}
	return r, err
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func (*PublishParams) FaultSite() Participant { return BrokerP }

func (*PublishParams) Draw(d Diagram, r Result) { drawPublished(d, "raw "+r.verbsOr().Publish, r) }

// drawPublished notes each entry a step put on the broker directly.
func drawPublished(d Diagram, verb string, r Result) {
	for _, e := range r.Entries {
		d.Note(fmt.Sprintf("%s %s → %s", verb, e.EventID, e.EntryID), BrokerP)
	}
}
