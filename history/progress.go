package history

import (
	"fmt"
	"strings"
	"time"
)

// A running system is judged on progress as well as safety: committed work
// that a consumer of its group, running for the whole settle, never
// finishes is a failure (stuck), however safe the state it stopped in. The
// runner settles a team's system until nothing is owed or its limit struck
// (judge/settle.go); this judges what was still owed then.

// Progress is what settling saw of the services that owe the run work.
type Progress struct {
	// Consumers maps each consumer id to the live services that read as it
	// (or, where the wire does not say which group a service reads, the
	// consumer services told the run's consumer id), each described: its
	// process, and the last lines it wrote.
	Consumers map[string][]string
	// Relays are the live services that use the producer's database,
	// described likewise.
	Relays []string
	// Full: settling ran to its limit with work still owed, so the
	// services had the whole limit (and every timer they announced to the
	// broker) to finish it. When false, settling ended early and
	// EarlyWhy says why; what is left is then not judged stuck.
	Full     bool
	Limit    time.Duration
	EarlyWhy string
	// Aside says, per event, where a consumer published it besides the
	// scenario's destination (not its declared dead-letter one): a hint
	// in the witness.
	Aside map[string]string
}

// stuckRelay: an event still unpublished after the whole settle while a
// relay ran. One violation per event, whichever consumer waits for it.
func stuckRelay(ops []Op, st State) []Violation {
	p := st.Team.Progress
	if p == nil || len(p.Relays) == 0 {
		return nil
	}
	var vs []Violation
	for _, ev := range sortedKeys(st.Unpublished) {
		if _, committed := st.Outbox[ev]; !committed {
			continue
		}
		if !p.Full {
			st.NotJudged[fmt.Sprintf("%s (event %s, unpublished)", Stuck, ev)] = p.EarlyWhy
			continue
		}
		vs = append(vs, Violation{Stuck, "", ev, fmt.Sprintf("committed, and still unpublished in the outbox after the whole settle (%s) while the services that use the producer's database ran: %s",
			p.Limit, strings.Join(p.Relays, "; ")), trail(ops, ev)})
	}
	return vs
}

// stuckConsumers judges stuck for each consumer, past the events already
// judged lost or stranded for it in vs.
func stuckConsumers(ops []Op, st State, consumers []string, vs []Violation) []Violation {
	var out []Violation
	for _, c := range consumers {
		judged := map[string]bool{}
		for _, v := range vs {
			_, unjudged := st.NotJudged[v.Invariant] // Check drops it: the event would get no verdict
			if v.Consumer == c && (v.Invariant == Lost || v.Invariant == Stranded) && !unjudged {
				judged[v.EventID] = true
			}
		}
		if cs := st.Consumers[c]; cs != nil {
			out = append(out, stuck(c, ops, cs, st, judged)...)
		}
	}
	return out
}

// stuck: an event committed and published that consumer c never applied,
// not dead-lettered and not judged lost or stranded already (lost says no
// path is left, stranded that only a claim nobody makes would take it;
// stuck is the rest: a path is left and nobody takes it to the end), while
// a consumer of c ran for the whole settle.
func stuck(c string, ops []Op, cs *Consumer, st State, judged map[string]bool) []Violation {
	p := st.Team.Progress
	if p == nil || len(p.Consumers[c]) == 0 {
		return nil // nobody runs who would apply it: not owed
	}
	var vs []Violation
	for _, ev := range sortedKeys(st.Outbox) {
		if _, applied := cs.Inbox[ev]; applied || st.Unpublished[ev] || st.DeadLetters[ev] || judged[ev] {
			continue
		}
		if !p.Full {
			st.NotJudged[fmt.Sprintf("%s (event %s of %s)", Stuck, ev, c)] = p.EarlyWhy
			continue
		}
		vs = append(vs, Violation{Stuck, c, ev, fmt.Sprintf("committed and published, never applied, although a consumer of %s ran for the whole settle (%s): %s; %s",
			c, p.Limit, deliveredText(c, ev, ops, cs, st.Team), strings.Join(p.Consumers[c], "; ")), trail(relevant(ops, c), ev)})
	}
	return vs
}

// deliveredText says what the broker did with ev for c meanwhile: how
// often the wire saw it handed out and acked, and what the broker still
// holds pending of it.
func deliveredText(c, ev string, ops []Op, cs *Consumer, t *Team) string {
	n, acked := 0, 0
	for _, op := range ops {
		if op.Consumer == c && op.EventID == ev && isDelivery(op) {
			n++
			if op.Acked {
				acked++
			}
		}
	}
	var parts []string
	switch {
	case n == 0:
		parts = append(parts, "never handed to it on the wire")
	case acked == 0:
		parts = append(parts, fmt.Sprintf("handed to it %d time(s), never acked", n))
	default:
		parts = append(parts, fmt.Sprintf("handed to it %d time(s), %d acked", n, acked))
	}
	for _, pe := range append(append([]Pending(nil), cs.Untaken...), cs.Undecided...) {
		if pe.EventID == ev || pe.EventID == "" && t.EntryEvents[pe.EntryID] == ev {
			parts = append(parts, fmt.Sprintf("entry %s pending, held by %s, delivered %d time(s), idle %s", pe.EntryID, pe.Holder, pe.Deliveries, pe.Idle.Round(time.Millisecond)))
		}
	}
	return strings.Join(parts, "; ")
}

// asideHints adds to each violation about an event a consumer published
// elsewhere (not to the declared dead-letter destination) where it went:
// a dead-letter stream the system file does not name looks like a loss.
func asideHints(vs []Violation, p *Progress) {
	if p == nil {
		return
	}
	for i, v := range vs {
		if aside := p.Aside[v.EventID]; aside != "" && v.EventID != "" && (v.Invariant == Lost || v.Invariant == AckedWithoutEffect || v.Invariant == Stuck) {
			vs[i].Detail += "; " + aside
		}
	}
}
