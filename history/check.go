package history

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/outboxdrill/runner/broker"
)

// Check returns the invariants ops and st break, for each of the consumer
// ids (those the scenario's steps name), in a stable order.
// models maps each read model to the consumer ids that write it.
func Check(ops []Op, st State, consumers []string, models map[string][]string) []Violation {
	if st.NotJudged == nil {
		st.NotJudged = map[string]string{}
	}
	if st.Inapplicable == nil {
		st.Inapplicable = map[string]string{}
	}
	switch {
	case st.Books == nil && st.Team != nil:
		st.Inapplicable[Unbalanced] = "a team's system: its journal, ledger and balances are not mapped, only its outbox, inbox and read model"
	case st.Books == nil:
		st.NotJudged[Unbalanced] = "the producer's journal, ledger and balances were not read"
	}
	if st.Team != nil && st.Team.Progress == nil {
		st.NotJudged[Stuck] = "settling did not say which services still ran at the end"
	}
	if st.Team == nil { // TeamOnly
		st.Inapplicable[Stuck] = "the reference pipeline: no process runs on its own, each step does its work and returns, so nothing can stop making progress between the steps"
	}
	if !st.HasStream {
		st.NotJudged[Lost] = "the broker cannot list the entries it holds (no entry log), so an event no path can deliver any more cannot be told from one still on its way"
	}
	var vs []Violation
	if st.Team != nil {
		for _, c := range consumers {
			if cs := st.Consumers[c]; cs != nil {
				vs = append(vs, checkTeam(c, cs, st, ops)...)
			}
		}
	}
	if st.Team != nil {
		vs = append(vs, stuckRelay(ops, st)...)
	}
	vs = append(vs, doublePublished(ops)...)
	vs = append(vs, crossPublished(ops, st)...)
	vs = append(vs, unbalanced(ops, st)...)
	for _, m := range sortedKeys(models) {
		vs = append(vs, doubleApplied(m, ops)...)
		vs = append(vs, projection(m, models[m], ops, st)...)
	}
	if len(consumers) == 0 && st.Team == nil {
		// No step read: lost still has a meaning, for any reader to come.
		// An event marked published that the broker holds no entry of can
		// reach none (lost with no consumer named nothing before).
		vs = append(vs, lost("", ops, &Consumer{}, st)...)
	}
	ord := outboxOrder(st)
	for _, c := range consumers {
		cs := st.Consumers[c]
		if cs == nil {
			cs = &Consumer{}
		}
		mine := forConsumer(ops, c)
		vs = append(vs, phantoms(c, mine, st)...)
		vs = append(vs, ackedWithoutEffect(c, mine, cs, st.DeadLetters)...)
		vs = append(vs, lost(c, ops, cs, st)...)
		vs = append(vs, stranded(c, mine, cs, st)...)
		vs = append(vs, orderVerdicts(c, cs, st, ops, ord)...)
	}
	if st.Team != nil {
		vs = append(vs, stuckConsumers(ops, st, consumers, vs)...)
		asideHints(vs, st.Team.Progress)
	}
	return slices.DeleteFunc(vs, func(v Violation) bool { _, skip := st.NotJudged[v.Invariant]; return skip })
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isDelivery(op Op) bool {
	return op.Kind != Commit && op.Kind != Publish && op.Kind != Purge && op.Kind != Pass
}

// forConsumer keeps c's deliveries and purges.
func forConsumer(ops []Op, c string) []Op {
	var out []Op
	for _, op := range ops {
		if op.Consumer == c && op.Kind != Commit && op.Kind != Publish {
			out = append(out, op)
		}
	}
	return out
}

// trail is every op of one event: the witness of a violation about it.
func trail(ops []Op, event string) []Op {
	var out []Op
	for _, op := range ops {
		if op.EventID == event {
			out = append(out, op)
		}
	}
	return out
}

// doubleApplied judges a read model: every applied delivery into it moved it.
func doubleApplied(model string, ops []Op) []Violation {
	var applies = map[string][]Op{}
	var order []string
	for _, op := range ops {
		if op.Kind == Applied && op.Model == model {
			if len(applies[op.EventID]) == 0 {
				order = append(order, op.EventID)
			}
			applies[op.EventID] = append(applies[op.EventID], op)
		}
	}
	var vs []Violation
	for _, ev := range order {
		if n := len(applies[ev]); n > 1 {
			vs = append(vs, Violation{DoubleApplied, "", ev, fmt.Sprintf("applied %d times to read model %s", n, model), applies[ev]})
		}
	}
	return vs
}

func phantoms(c string, mine []Op, st State) []Violation {
	var vs []Violation
	for _, op := range mine {
		if op.Kind != Applied {
			continue
		}
		committed, ok := st.Outbox[op.EventID]
		switch {
		case !ok:
			vs = append(vs, Violation{Phantom, c, op.EventID, "applied, but the producer never committed it", []Op{op}})
		case op.Payload != "" && !SamePayload(op.Payload, committed):
			vs = append(vs, Violation{Phantom, c, op.EventID, fmt.Sprintf("applied payload %s, committed %s", op.Payload, committed), []Op{op}})
		}
	}
	return vs
}

// ackedWithoutEffect: an ack is only safe once the effect is durable. An
// event whose inbox row was purged later is judged by double_applied, not
// here; a team's consumer that dead-lettered the event itself (its
// delivery carries no DLQ flag: deadLetters says so) acked it rightly.
func ackedWithoutEffect(c string, mine []Op, cs *Consumer, deadLetters map[string]bool) []Violation {
	purgedAfter := map[int]bool{}
	purged := false
	for i := len(mine) - 1; i >= 0; i-- {
		purged = purged || mine[i].Kind == Purge
		purgedAfter[i] = purged
	}
	var vs []Violation
	seen := map[string]bool{}
	for i, op := range mine {
		if !op.Acked || op.DLQ || seen[op.EventID] || purgedAfter[i] || deadLetters[op.EventID] && op.Kind == Delivered {
			continue
		}
		if _, ok := cs.Inbox[op.EventID]; !ok && !cs.Stray[op.EventID] {
			seen[op.EventID] = true
			what := "entry " + op.EntryID
			if op.EntryID == "" {
				what = "a delivery of it" // a broker whose entries have no id on the wire
			}
			vs = append(vs, Violation{AckedWithoutEffect, c, op.EventID,
				fmt.Sprintf("%s was acked (outcome %s) but the inbox holds no row for the event", what, op.Kind), trail(mine, op.EventID)})
		}
	}
	return vs
}

// projection compares a read model with the sum over the inboxes of the
// consumers writing it, plus the effects whose inbox rows a purge deleted
// (a purge forgets what was applied; it does not undo it).
func projection(model string, writers []string, ops []Op, st State) []Violation {
	want := purgedEffects(model, ops)
	for _, c := range writers {
		if cs := st.Consumers[c]; cs != nil {
			for cur, s := range cs.InboxSums {
				want[cur] = Sum{Amount: want[cur].Amount + s.Amount, Events: want[cur].Events + s.Events}
			}
		}
	}
	got := st.Projections[model]
	curs := sortedKeys(want)
	for _, cur := range sortedKeys(got) {
		if _, ok := want[cur]; !ok {
			curs = append(curs, cur)
		}
	}
	var vs []Violation
	for _, cur := range curs {
		if p, in := got[cur], want[cur]; p != in {
			vs = append(vs, Violation{ProjectionMismatch, "", "", fmt.Sprintf("read model %s, %s: projection has %d over %d events, the inbox of %s sums to %d over %d",
				model, cur, p.Amount, p.Events, strings.Join(writers, " + "), in.Amount, in.Events), nil})
		}
	}
	return vs
}

// lost: committed, and no path is left on which c could still apply it:
// not applied (a dead letter replayed is judged by what became of the
// replay), not waiting in the outbox or the dead-letter stream, and no entry
// of it the broker still holds that c has not acked.
func lost(c string, ops []Op, cs *Consumer, st State) []Violation {
	applied, acked := map[string]bool{}, map[string]bool{}
	for _, op := range ops {
		if op.Consumer != c || !isDelivery(op) {
			continue
		}
		applied[op.EventID] = applied[op.EventID] || op.Kind == Applied
		acked[op.EntryID] = acked[op.EntryID] || op.Acked
	}
	held, known := heldEntries(ops, st)
	var vs []Violation
	for _, ev := range sortedKeys(st.Outbox) {
		_, inInbox := cs.Inbox[ev]
		if inInbox || applied[ev] || st.Unpublished[ev] || st.DeadLetters[ev] || !st.HasStream {
			continue
		}
		if cs.HasReach {
			if v, ok := lostByBroker(c, ev, cs.Reach, st.NotJudged); ok {
				v.Witness = trail(relevant(ops, c), ev)
				vs = append(vs, v)
			}
			continue
		}
		if left, took, ok := st.Team.unsettled(c, ev, ops); ok {
			if left > 0 {
				continue // a copy c has not settled is still in its queue
			}
			why := "the broker took no copy of it"
			if took > 0 {
				why = fmt.Sprintf("group %s's consumers settled every copy of it the broker took (%d): acked, or rejected without requeue", c, took)
			}
			vs = append(vs, Violation{Lost, c, ev, "committed, never applied, and " + why, trail(relevant(ops, c), ev)})
			continue
		}
		if live, n, ok := st.Team.live(c, ev); ok {
			if live {
				continue // the broker may still hand c an entry of it
			}
			what := "committed, marked published in the outbox, never applied, and the broker holds no entry of it"
			if n > 0 {
				what = fmt.Sprintf("committed, published, never applied, and the broker holds %d entr(ies) of it, none of which group %s can be handed any more (acked, or behind the group's last-delivered id and not pending)", n, c)
			}
			vs = append(vs, Violation{Lost, c, ev, what, trail(relevant(ops, c), ev)})
			continue
		}
		live := slices.ContainsFunc(held[ev], func(id string) bool { return !acked[id] })
		if live || !known && st.Stream[ev] > 0 {
			continue // an entry c has not acked is still there
		}
		why := "marked published, but the broker holds no entry of it"
		if st.CDC {
			why = "the replication slot's confirmed LSN is past it (or the slot never saw it), but the broker holds no entry of it"
		}
		if st.Stream[ev] > 0 {
			why = fmt.Sprintf("every entry of it the broker holds (%d) was acked, yet it was never applied", st.Stream[ev])
		}
		vs = append(vs, Violation{Lost, c, ev, "committed and " + why, trail(relevant(ops, c), ev)})
	}
	return vs
}

// lostByBroker judges event ev, committed and never applied by c, on what
// the broker says of its entries for group c: lost when none may still be
// handed to c. An entry the broker leaves undecided leaves the event not
// judged (noted in notJudged), never passed.
func lostByBroker(c, ev string, es []broker.GroupEntry, notJudged map[string]string) (Violation, bool) {
	var finished []string
	for _, e := range es {
		if e.EventID != ev {
			continue
		}
		switch e.Fate {
		case broker.Deliverable:
			return Violation{}, false
		case broker.Undecided:
			notJudged[fmt.Sprintf("%s (event %s of %s)", Lost, ev, c)] = e.Why
			return Violation{}, false
		}
		finished = append(finished, e.Why)
	}
	why := "the broker holds no entry of it"
	if len(finished) > 0 {
		why = fmt.Sprintf("the broker will never hand it to group %s again: %s", c, strings.Join(finished, "; "))
	}
	return Violation{Invariant: Lost, Consumer: c, EventID: ev, Detail: "committed, never applied, and " + why}, true
}

// heldEntries maps each event to the ids of its entries the broker still
// holds. Brokers append and a retention limit drops the oldest, so those are
// the newest StreamLen distinct entries the history published; known is
// false when the history does not account for every entry the broker holds.
func heldEntries(ops []Op, st State) (map[string][]string, bool) {
	var order []Op
	seen := map[string]bool{}
	for _, op := range ops {
		if op.Kind == Publish && op.EntryID != "" && !seen[op.EntryID] {
			seen[op.EntryID] = true // a broker-side duplicate returns the original's id
			order = append(order, op)
		}
	}
	total := 0
	for _, n := range st.Stream {
		total += n
	}
	held := map[string][]string{}
	if total > len(order) {
		return held, false
	}
	for _, op := range order[len(order)-total:] {
		held[op.EventID] = append(held[op.EventID], op.EntryID)
	}
	return held, true
}

// relevant are the producer's and the relay's ops and c's own.
func relevant(ops []Op, c string) []Op {
	var out []Op
	for _, op := range ops {
		if op.Consumer == "" || op.Consumer == c {
			out = append(out, op)
		}
	}
	return out
}

// open is an entry c received and has not acked, as stranded follows it.
type open struct {
	op       Op
	readOn   bool // a later consume pass of c
	claimed  bool // a later claim pass of c that could take it
	tried    bool // a later claim pass of c that could not (State.LiveKeeps)
	sequence int
}

// stranded: by the history, an entry c received and never acked, whose
// event c never applied, after which c read new entries again (a consume
// pass) and never claimed: the never-claim anti-pattern. Where a live
// worker keeps what it holds (State.LiveKeeps), a claim does not take the
// entry back and counts as reading on. A scenario that simply ends inside a
// fault window is not judged stranded.
func stranded(c string, mine []Op, cs *Consumer, st State) []Violation {
	if cs.HasPending && cs.Pending == 0 {
		return nil
	}
	pending := map[string]*open{}
	applied := map[string]bool{}
	for i, op := range mine {
		switch {
		case op.Kind == Pass:
			for _, o := range pending {
				// A nacked entry is back with the broker: any pass may
				// take it, where a live worker keeps the others.
				reach := op.TakesOver && (!st.LiveKeeps || o.op.Nacked)
				o.readOn = o.readOn || !reach
				o.claimed = o.claimed || reach
				o.tried = o.tried || op.TakesOver && !reach
			}
		case !isDelivery(op):
		case op.Acked:
			delete(pending, op.EntryID)
		default:
			pending[op.EntryID] = &open{op: op, sequence: i}
		}
		applied[op.EventID] = applied[op.EventID] || op.Kind == Applied
	}
	var left []*open
	for _, o := range pending {
		// An entry the broker dead-lettered itself (a delivery limit) is not
		// pending any more: it waits in the dead letters, not in the group.
		if o.readOn && !o.claimed && !applied[o.op.EventID] && !st.DeadLetters[o.op.EventID] {
			left = append(left, o)
		}
	}
	sort.Slice(left, func(i, j int) bool { return left[i].sequence < left[j].sequence })
	if cs.HasReach {
		strandedByBroker(c, left, cs.Reach, st.NotJudged)
		return nil
	}
	var vs []Violation
	for _, o := range left {
		why := "the consumer read on and never claimed it"
		if o.tried {
			why = "the consumer read on; its claims could not take it, as a live worker keeps what it holds on this broker until it nacks it or ends"
		}
		vs = append(vs, Violation{Stranded, c, o.op.EventID, fmt.Sprintf("entry %s is still pending (last outcome %s): %s", o.op.EntryID, o.op.Kind, why), trail(mine, o.op.EventID)})
	}
	return vs
}

// strandedByBroker: where the broker says what a group may still be handed
// (a Kafka share group), an entry the history left pending is stranded by
// nobody: one the broker finished is gone (lost judges its event), and one
// it still holds for a worker comes back by itself once the worker's
// acquisition lock runs out (KIP-932,
// https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka),
// no claim needed. Only one the broker leaves undecided is not judged.
func strandedByBroker(c string, left []*open, es []broker.GroupEntry, notJudged map[string]string) {
	for _, o := range left {
		for _, e := range es {
			if e.ID == o.op.EntryID && e.Fate == broker.Undecided {
				notJudged[fmt.Sprintf("%s (entry %s of %s)", Stranded, e.ID, c)] = e.Why
			}
		}
	}
}

// doublePublished: a relay crash before marking legitimately publishes an
// event again in a LATER relay step (at least once); one step publishing it
// twice means its relays did not exclude each other.
func doublePublished(ops []Op) []Violation {
	type key struct {
		step  int
		event string
	}
	pubs := map[key][]Op{}
	var order []key
	for _, op := range ops {
		if op.Kind != Publish || op.Republish {
			continue
		}
		k := key{op.StepN, op.EventID}
		if len(pubs[k]) == 0 {
			order = append(order, k)
		}
		pubs[k] = append(pubs[k], op)
	}
	var vs []Violation
	for _, k := range order {
		if n := len(pubs[k]); n > 1 {
			vs = append(vs, Violation{DoublePublished, "", k.event, fmt.Sprintf("one relay step published it %d times", n), pubs[k]})
		}
	}
	return vs
}

// purgedEffects sums, per currency, the applications into model whose inbox
// rows a later purge of their consumer deleted.
func purgedEffects(model string, ops []Op) map[string]Sum {
	type effect struct {
		consumer string
		payload  string
	}
	var live []effect
	out := map[string]Sum{}
	for _, op := range ops {
		switch {
		case op.Kind == Applied && op.Model == model:
			live = append(live, effect{op.Consumer, op.Payload})
		case op.Kind == Purge:
			live = slices.DeleteFunc(live, func(e effect) bool {
				if e.consumer != op.Consumer {
					return false
				}
				var t struct {
					Amount   int64  `json:"amount"`
					Currency string `json:"currency"`
				}
				if json.Unmarshal([]byte(e.payload), &t) == nil {
					out[t.Currency] = Sum{Amount: out[t.Currency].Amount + t.Amount, Events: out[t.Currency].Events + 1}
				}
				return true
			})
		}
	}
	return out
}

// unbalanced judges the producer's own atomicity: every transfer writes its
// journal row, ledger entries, balances and outbox row together or not at
// all, so the final books must agree with the outbox and with themselves.
func unbalanced(ops []Op, st State) []Violation {
	bk := st.Books
	if bk == nil {
		return nil
	}
	var vs []Violation
	for _, ev := range sortedKeys(st.Outbox) {
		if !bk.Journal[ev] {
			vs = append(vs, Violation{Unbalanced, "", ev, "in the outbox, but the journal has no transfer for it", trail(ops, ev)})
		}
	}
	for _, ev := range sortedKeys(bk.Journal) {
		if _, ok := st.Outbox[ev]; !ok {
			vs = append(vs, Violation{Unbalanced, "", ev, "in the journal, but the outbox has no row for it", trail(ops, ev)})
		}
	}
	for _, cur := range bk.Unbalanced {
		vs = append(vs, Violation{Unbalanced, "", "", fmt.Sprintf("%s: the balances do not sum to zero", cur), nil})
	}
	for _, acct := range bk.Drift {
		vs = append(vs, Violation{Unbalanced, "", "", fmt.Sprintf("%s: the balance differs from the sum of its ledger entries", acct), nil})
	}
	return vs
}
