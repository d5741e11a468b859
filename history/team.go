package history

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/state"
)

// A team's consumer is a black box: what it did with a delivery (applied,
// duplicate, conflict) never crosses the wire. On a team's system the
// invariants that need it are judged from the final state instead, read
// once the system settled: the inbox rows as stored, the read model, the
// broker's pending lists, and the entry ids the proxies saw mapped to the
// business ids they carried.

// Team is what a team's system adds to State.
type Team struct {
	// EntryEvents maps each broker entry id the run saw (on the wire or in
	// the stream) to the business event id it carried.
	EntryEvents map[string]string
	// Amount extracts amount and currency from a payload (the system
	// file's paths); nil: the top-level amount and currency fields.
	Amount func(payload string) (int64, string, bool)
	// EventOf extracts the event id a payload carries, if the team's
	// payload carries one; nil: none is looked for.
	EventOf func(payload string) (string, bool)
	// Readers are the consumer ids a live service still read as when the
	// system settled; only their pending entries can be judged stranded.
	Readers map[string]bool
	// Held maps each event to the ids of the entries the broker holds of
	// it, as the broker lists them; nil when it cannot list them.
	Held map[string][]string
	// Copies, for a broker whose entries carry no id the wire shows
	// (AMQP), is how many copies of each event the broker took, as its own
	// log lists them; nil elsewhere. Every publish puts one copy in each
	// group's queue and every Acked delivery settled one for good, so a
	// group may still be handed an event while it settled fewer.
	Copies map[string]int
	// Deliverable are, per consumer group, the entries it may still be
	// handed (pending, or past its last-delivered id); a group missing
	// here does not exist yet, and whoever creates it decides.
	Deliverable map[string]map[string]bool
	// Progress is what settling saw of the services still running; nil
	// when it was not looked at (stuck is then not judged).
	Progress *Progress
	// Disruptions are what struck the system while it ran, in time order:
	// a publish again by another process after one is a retry, not a
	// double publish (crossPublished).
	Disruptions []Disruption
}

// live reports whether the broker holds an entry of ev that group c may
// still be handed, and how many entries of ev it holds; ok is false when
// the broker's own listing is not known (then the history's is used).
func (t *Team) live(c, ev string) (live bool, held int, ok bool) {
	if t == nil || t.Held == nil {
		return false, 0, false
	}
	ids := t.Held[ev]
	set, exists := t.Deliverable[c]
	for _, id := range ids {
		if !exists || set[id] {
			return true, len(ids), true
		}
	}
	return false, len(ids), true
}

// unsettled reports, where the broker is counted in copies (Copies),
// how many copies of ev group c may still be handed, and how many the
// broker took; ok is false elsewhere.
func (t *Team) unsettled(c, ev string, ops []Op) (left, took int, ok bool) {
	if t == nil || t.Copies == nil {
		return 0, 0, false
	}
	settled := 0
	for _, op := range ops {
		if op.Consumer == c && isDelivery(op) && op.EventID == ev && op.Acked {
			settled++
		}
	}
	return max(t.Copies[ev]-settled, 0), t.Copies[ev], true
}

// Pending is one entry still pending at the end, as the broker lists it.
type Pending struct {
	EntryID, EventID string
	Holder           string // the worker that holds it
	Idle             time.Duration
	Deliveries       int64
	Why              string // what settling saw of it
}

// resolved is an inbox row traced back to the business event it records.
type resolved struct {
	row   state.InboxRow
	event string // "" when nobody committed anything it could be
	via   string // how the row's key led to the event, for the witness
	other bool   // keyed by something else; its payload names the event
}

// resolve traces an inbox row to a committed event: its key is the event
// id, or the broker entry id of one of the event's entries (a consumer that
// dedupes on the wrong identity), or nothing anybody committed.
func (t *Team) resolve(st State, row state.InboxRow) resolved {
	if _, ok := st.Outbox[row.Key]; ok {
		return resolved{row: row, event: row.Key}
	}
	if ev, ok := t.EntryEvents[row.Key]; ok {
		if _, committed := st.Outbox[ev]; committed {
			return resolved{row: row, event: ev, via: fmt.Sprintf("its key %s is the broker entry id of an entry of %s", row.Key, ev)}
		}
	}
	if t.EventOf != nil {
		if ev, ok := t.EventOf(row.Payload); ok {
			if _, committed := st.Outbox[ev]; committed {
				return resolved{row: row, event: ev, other: true}
			}
		}
	}
	return resolved{row: row}
}

// teamInbox fills cs.Inbox with c's rows traced to business events and
// returns what the rows alone show: a row for an event nobody committed or
// with another payload (phantom), two rows for one event (double_applied).
func teamInbox(c string, cs *Consumer, st State, ops []Op) []Violation {
	cs.Inbox, cs.Stray = map[string]string{}, map[string]bool{}
	var vs []Violation
	byEvent := map[string][]resolved{}
	var order []string
	for _, row := range cs.Rows {
		r := st.Team.resolve(st, row)
		if r.event == "" {
			cs.Stray[row.Key] = true
			vs = append(vs, Violation{Phantom, c, row.Key, fmt.Sprintf("the inbox holds a row for %s, which nobody committed (payload %s)", row.Key, row.Payload), trail(ops, row.Key)})
			continue
		}
		if committed := st.Outbox[r.event]; !SamePayload(row.Payload, committed) {
			vs = append(vs, Violation{Phantom, c, r.event, fmt.Sprintf("the inbox row applied payload %s, committed %s", row.Payload, committed), trail(ops, r.event)})
		}
		if len(byEvent[r.event]) == 0 {
			order = append(order, r.event)
			cs.Inbox[r.event] = row.Payload
		}
		byEvent[r.event] = append(byEvent[r.event], r)
	}
	for _, ev := range order {
		rs := byEvent[ev]
		if len(rs) < 2 {
			continue
		}
		var keys []string
		byEntry, other := 0, 0
		for _, r := range rs {
			keys = append(keys, r.row.Key)
			if r.via != "" {
				byEntry++
			}
			if r.other {
				other++
			}
		}
		why := ""
		switch {
		case byEntry > 0:
			why = fmt.Sprintf(": %d of them keyed by the broker entry id of one of its entries (the consumer dedupes on the entry id, new on every publish, not on the business event id)", byEntry)
		case other > 0:
			why = fmt.Sprintf(": %d of them keyed by something else than the event id; their payloads name %s (the consumer does not dedupe on the business event id)", other, ev)
		}
		vs = append(vs, Violation{DoubleApplied, c, ev, fmt.Sprintf("the inbox holds %d rows for it (keys %s)%s", len(rs), strings.Join(keys, ", "), why), trail(ops, ev)})
	}
	return vs
}

// teamReadModel: the read model of c moves once per event in c's inbox,
// by the committed amount: per currency, more moves than distinct events
// is an event applied twice (double_applied), and an amount nobody
// committed too (phantom) when the extra moves add what no committed
// amounts could; as many moves but another amount is an amount nobody
// committed (phantom). A row of the inbox that
// traces to no committed event counts by its own payload: it is reported
// as phantom already. (projection_mismatch compares the read model with
// the inbox's own payloads.)
func teamReadModel(c string, cs *Consumer, st State, ops []Op, inboxPhantom bool) []Violation {
	events, amounts := map[string]int64{}, map[string]int64{}
	count := func(payload, what string) bool {
		amount, cur, ok := st.Team.amount(payload)
		if !ok {
			st.NotJudged[DoubleApplied+" (read model "+c+")"] = fmt.Sprintf("%s has no amount and currency where the system file says (%s): the read model's moves could not be counted per currency", what, payload)
			return false
		}
		events[cur]++
		amounts[cur] += amount
		return true
	}
	for _, ev := range sortedKeys(cs.Inbox) {
		if !count(st.Outbox[ev], "the committed payload of "+ev) {
			return nil
		}
	}
	for _, row := range cs.Rows {
		if st.Team.resolve(st, row).event == "" && !count(row.Payload, "the inbox row "+row.Key) {
			return nil
		}
	}
	// The smallest and largest amount anybody committed, per currency: an
	// extra move may re-apply any committed event, in the inbox or not.
	lo, hi, seen := map[string]int64{}, map[string]int64{}, map[string]bool{}
	for _, payload := range st.Outbox {
		if amount, cur, ok := st.Team.amount(payload); ok {
			lo[cur], hi[cur] = min(amount, lo[cur]), max(amount, hi[cur])
			if !seen[cur] {
				lo[cur], hi[cur], seen[cur] = amount, amount, true
			}
		}
	}
	var vs []Violation
	got := st.Projections[c]
	for _, cur := range sortedKeys(got) {
		switch p := got[cur]; {
		case p.Events > events[cur]:
			vs = append(vs, Violation{DoubleApplied, c, "", fmt.Sprintf("read model %s, %s: it counts %d events, but the inbox holds %d distinct events in %s: an event moved it more than once",
				c, cur, p.Events, events[cur], cur), redelivered(ops, c)})
			// The extra moves, k of them, re-applied committed amounts:
			// together between k times the smallest and k times the
			// largest. Outside that, one was an amount nobody committed
			// (a forged copy applied); inside, nothing is claimed. An
			// inbox row that shows the phantom already says it.
			if k, extra := p.Events-events[cur], p.Amount-amounts[cur]; !inboxPhantom && seen[cur] && (extra < k*lo[cur] || extra > k*hi[cur]) {
				vs = append(vs, Violation{Phantom, c, "", fmt.Sprintf("read model %s, %s: its %d extra move(s) add %d, but the events were committed with amounts from %d to %d: an amount nobody committed was applied",
					c, cur, k, extra, lo[cur], hi[cur]), redelivered(ops, c)})
			}
		case p.Events == events[cur] && p.Amount != amounts[cur]:
			vs = append(vs, Violation{Phantom, c, "", fmt.Sprintf("read model %s, %s: it holds %d over %d events, but the events in the inbox were committed with %d: an amount nobody committed was applied",
				c, cur, p.Amount, p.Events, amounts[cur]), redelivered(ops, c)})
		}
	}
	return vs
}

// redelivered are c's deliveries of events delivered more than once: the
// candidates for a second application.
func redelivered(ops []Op, c string) []Op {
	n := map[string]int{}
	for _, op := range ops {
		if op.Consumer == c && op.Kind == Delivered {
			n[op.EventID]++
		}
	}
	var out []Op
	for _, op := range ops {
		if op.Consumer == c && op.Kind == Delivered && n[op.EventID] > 1 {
			out = append(out, op)
		}
	}
	return out
}

// teamStranded: an entry still pending after the system settled, whose
// event c never applied, while a live service read as c and did not take
// it again: nothing will deliver it short of a claim nobody makes.
func teamStranded(c string, cs *Consumer, st State, ops []Op) []Violation {
	if !st.Team.Readers[c] {
		return nil
	}
	eventOf := func(p Pending) string {
		if p.EventID != "" {
			return p.EventID
		}
		return st.Team.EntryEvents[p.EntryID]
	}
	for _, p := range cs.Undecided {
		if _, applied := cs.Inbox[eventOf(p)]; !applied {
			st.NotJudged[fmt.Sprintf("%s (entry %s of %s)", Stranded, p.EntryID, c)] = p.Why
		}
	}
	var vs []Violation
	for _, p := range cs.Untaken {
		ev := eventOf(p)
		if _, applied := cs.Inbox[ev]; applied {
			continue
		}
		why := "the consumer, still running, never took it again while the system settled"
		if p.Why != "" {
			why = p.Why
		}
		vs = append(vs, Violation{Stranded, c, ev, fmt.Sprintf("entry %s is still pending (held by %s, delivered %d time(s)) and its event was never applied: %s",
			p.EntryID, p.Holder, p.Deliveries, why), trail(ops, ev)})
	}
	return vs
}

// amount is the payload's amount and currency where the system file says.
func (t *Team) amount(payload string) (int64, string, bool) {
	if t.Amount != nil {
		return t.Amount(payload)
	}
	var p struct {
		Amount   json.Number `json:"amount"`
		Currency string      `json:"currency"`
	}
	if json.Unmarshal([]byte(payload), &p) != nil || p.Currency == "" {
		return 0, "", false
	}
	n, err := p.Amount.Int64()
	return n, p.Currency, err == nil
}

// checkTeam runs the team-only checks of consumer c, before the others
// read cs.Inbox.
func checkTeam(c string, cs *Consumer, st State, ops []Op) []Violation {
	vs := teamInbox(c, cs, st, ops)
	inboxPhantom := slices.ContainsFunc(vs, func(v Violation) bool { return v.Invariant == Phantom })
	vs = append(vs, teamReadModel(c, cs, st, ops, inboxPhantom)...)
	vs = append(vs, teamStranded(c, cs, st, ops)...)
	slices.SortStableFunc(vs, func(a, b Violation) int { return strings.Compare(a.Invariant, b.Invariant) })
	return vs
}
