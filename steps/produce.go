package steps

import (
	"context"
	"fmt"

	"github.com/outboxdrill/runner/pipeline"
)

// ProduceParams are the parameters of the produce step.
type ProduceParams struct {
	Event    string `param:"event" doc:"business event id; default the first of bus-1, bus-2, … not yet used in this scenario (a produce that rolled back has used its id too). On a team's system whose outbox event_id column is uuid, the name maps to its UUID v5 (URL namespace); bigint, integer or smallint, to the number it ends in (bus-7 → 7), else a stable hash"`
	Amount   int64  `param:"amount" default:"100" min:"1" doc:"atomic units moved"`
	Currency string `param:"currency" default:"USD" doc:"currency of the amount"`
	From     string `param:"from" default:"alice" doc:"account debited"`
	To       string `param:"to" default:"bob" doc:"account credited"`
	Fail     string `param:"fail" fault:"yes" enum:"divzero" doc:"divzero: SELECT 1/0 after the outbox insert, inside the producer transaction"`
	Agg      string `param:"aggregate" doc:"orders this event within an aggregate: the producer gives it the aggregate's next version (1, 2, …) in the same transaction (on a team's system the runner does, one past the highest this scenario committed, bound as ${aggregate} and ${version})"`
}

func (p *ProduceParams) Validate() error {
	if p.From == p.To {
		return fmt.Errorf("from and to are both %q: a transfer needs two accounts", p.From)
	}
	return nil
}

func produceDefs() []*Def {
	return []*Def{
		Define("produce", "Commit one transfer in ONE producer transaction: journal row, debit and credit ledger entries, balances and the outbox row.",
			[]Key{{"committed", "1 if the transaction committed"}, {"failed", "1 if the injected fault rolled it back"}},
			runProduce),
	}
}

func runProduce(ctx context.Context, env *Env, p *ProduceParams) (Result, error) {
	name := p.Event
	if name == "" {
		name = env.nextAutoID()
	}
	env.used[name] = true
	id, err := env.eventID(name)
	if err != nil {
		return Result{}, err
	}
	// The id is what the database, the wire and the report carry; the
	// scenario's steps know the event by its name.
	t := pipeline.Transfer{EventID: id, From: p.From, To: p.To, Amount: p.Amount, Currency: p.Currency, Aggregate: p.Agg}
	var res pipeline.ProduceResult
	if env.System != nil {
		t.Version = env.nextVersion(t.Aggregate)
		res, err = teamProduce(ctx, env, t, p.Fail)
	} else {
		res, err = (&pipeline.Producer{DB: env.Producer}).Produce(ctx, t, pipeline.Fault(p.Fail))
	}
	if err != nil {
		return Result{}, err
	}
	r := Result{Outcome: map[string]int64{"committed": b2i(res.Committed), "failed": b2i(res.Failed)}}
	t = res.Transfer // with its version
	shown := showEvent(name, t.EventID)
	if !res.Committed {
		r.Details = append(r.Details, fmt.Sprintf("%s: %s", shown, res.Reason))
		return r, nil
	}
	payload, err := env.payload(t)
	if err != nil {
		return Result{}, err
	}
	env.transfers[name] = t
	env.last = name
	r.Entries = append(r.Entries, Entry{EventID: t.EventID, Outcome: "committed", Payload: payload})
	line := fmt.Sprintf("committed %s: %d %s %s → %s", shown, t.Amount, t.Currency, t.From, t.To)
	if t.Aggregate != "" {
		line += fmt.Sprintf(", aggregate %s version %d", t.Aggregate, t.Version)
	}
	r.Details = append(r.Details, line)
	return r, nil
}

// nextVersion is, on a team's system, the next version of aggregate agg
// (0 for none): one past the highest this scenario committed, as the
// reference producer counts in its own transaction. The team's produce
// statement gets it as ${version}, and its payload where the template
// has "${version}" (the runner's own payload: version).
func (e *Env) nextVersion(agg string) int64 {
	if agg == "" {
		return 0
	}
	var last int64
	for _, t := range e.transfers {
		if t.Aggregate == agg {
			last = max(last, t.Version)
		}
	}
	return last + 1
}

func (*ProduceParams) FaultSite() Participant { return ProducerDB }

// Draw notes what was committed, or why it rolled back.
func (*ProduceParams) Draw(d Diagram, r Result) {
	for _, line := range r.Details {
		d.Note(line, ProducerDB)
	}
}
