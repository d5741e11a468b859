package soak

import (
	"context"
	"fmt"
	"sync"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/pipeline"
)

// soakHistory records, as history ops, every commit, publish, delivery and
// ack a soak caused, so that the scenarios' checker judges a soak too.
// Each relay pass, replay and consume or claim pass is one step.
type soakHistory struct {
	mu   sync.Mutex
	ops  []history.Op
	step int
}

// add appends ops as the next step, under one lock so that a pass's ops
// stay together and publishes stay in the order the broker appended them.
func (h *soakHistory) add(name string, ops ...history.Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.step++
	for _, op := range ops {
		op.Step, op.StepN = fmt.Sprintf("soak step %d (%s)", h.step, name), h.step
		h.ops = append(h.ops, op)
	}
}

func (h *soakHistory) committed(res pipeline.ProduceResult) {
	if res.Committed {
		t := res.Transfer
		h.add("produce", history.Op{Kind: history.Commit, EventID: t.EventID, Payload: t.Payload()})
	}
}

// published records one relay step's (or replay's) publishes; a relay step
// of several concurrent relays is one step: that is what double_published
// judges.
func (h *soakHistory) published(name string, republish bool, pubs ...pipeline.Published) {
	ops := make([]history.Op, len(pubs))
	for i, p := range pubs {
		ops[i] = history.Op{Kind: history.Publish, EventID: p.EventID, EntryID: p.EntryID, Payload: p.Payload, Republish: republish}
	}
	h.add(name, ops...)
}

// handled records a consume or claim pass: the pass, then each delivery.
func (h *soakHistory) handled(name string, opt pipeline.ConsumeOptions, takesOver bool, res pipeline.ConsumeResult) {
	ops := []history.Op{{Kind: history.Pass, Consumer: opt.Consumer, TakesOver: takesOver}}
	for _, d := range res.Handled {
		ops = append(ops, history.Op{Kind: string(d.Outcome), EventID: d.EventID, EntryID: d.ID, Consumer: opt.Consumer,
			Model: opt.ReadModel(), Payload: d.Payload, Acked: d.Acked, DLQ: d.DeadLettered})
	}
	h.add(name, ops...)
}

func (h *soakHistory) snapshot() []history.Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]history.Op(nil), h.ops...)
}

// Totals are the drained pipeline's counts, for the report.
type Totals struct {
	Committed     int   // events in the outbox
	StreamEntries int   // entries the broker holds (duplicates included)
	Applied       int   // events in the consumer's inbox
	Pending       int64 // entries delivered, not acked
}

// judge reads the final state and checks the recorded history against it
// with history.Check, the checker the scenarios use.
func (h *soakHistory) judge(ctx context.Context, env pipelineEnv) (Totals, []history.Violation, error) {
	ids := []string{soakConsumer}
	st, err := history.LoadState(ctx, env.prod.DB, env.cons.DB, env.b, ids, ids)
	if err != nil {
		return Totals{}, nil, err
	}
	vs := history.Check(h.snapshot(), st, ids, map[string][]string{soakConsumer: ids})
	cs := st.Consumers[soakConsumer]
	tot := Totals{Committed: len(st.Outbox), Applied: len(cs.Inbox), Pending: cs.Pending}
	for _, n := range st.Stream {
		tot.StreamEntries += n
	}
	return tot, vs, nil
}
