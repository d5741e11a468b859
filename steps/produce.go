package steps

import (
	"context"
	"fmt"

	"github.com/outboxdrill/runner/pipeline"
)

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

func (p *ProduceParams) Validate() error {
	if p.From == p.To {
		return fmt.Errorf("from and to are both %q: a transfer needs two accounts", p.From)
	}
	return nil
}

func init() {
	Define("produce", "Commit one transfer in ONE producer transaction: journal row, debit and credit ledger entries, balances and the outbox row.",
		[]Key{{"committed", "1 if the transaction committed"}, {"failed", "1 if the injected fault rolled it back"}},
		runProduce)
}

func runProduce(ctx context.Context, env *Env, p *ProduceParams) (Result, error) {
	t := pipeline.Transfer{EventID: p.Event, From: p.From, To: p.To, Amount: p.Amount, Currency: p.Currency, Aggregate: p.Agg}
	if t.EventID == "" {
		t.EventID = env.nextAutoID()
	}
	env.used[t.EventID] = true
	var res pipeline.ProduceResult
	var err error
	if env.System != nil {
		res, err = teamProduce(ctx, env, t, p.Fail)
	} else {
		res, err = (&pipeline.Producer{DB: env.Producer}).Produce(ctx, t, pipeline.Fault(p.Fail))
	}
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

func (*ProduceParams) FaultSite() Participant { return ProducerDB }

// Draw notes what was committed, or why it rolled back.
func (*ProduceParams) Draw(d Diagram, r Result) {
	for _, line := range r.Details {
		d.Note(line, ProducerDB)
	}
}
