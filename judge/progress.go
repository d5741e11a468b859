package judge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/state"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// Progress: a running system owes the run every committed event, applied
// by each consumer id a live service reads as. Settling waits for what is
// owed up to its limit (owedWork); what is still owed then is judged stuck
// (history.Progress, described by progressOf).

// consumersOf maps each consumer id a live consumer service reads as to
// those services: the groups its broker proxy saw it read as (Redis), else
// the consumer ids it was handed deliveries as (readAs, from the wire),
// else — it has not read yet — the run's consumer id, which is what the
// services are told.
func consumersOf(live []sysrun.Live, consumer string, readAs map[string][]string) map[string][]string {
	out := map[string][]string{}
	for _, l := range live {
		if !l.Consumer {
			continue
		}
		groups := l.Groups
		if len(groups) == 0 {
			groups = readAs[l.Name]
		}
		if len(groups) == 0 {
			groups = []string{consumer}
		}
		for _, g := range groups {
			out[g] = append(out[g], l.Name)
		}
	}
	return out
}

// producersOf are the live services that use the producer's database: the
// relay, and whatever else may still publish the outbox.
func producersOf(live []sysrun.Live) (names []string, proxied bool) {
	for _, l := range live {
		if l.Producer {
			names = append(names, l.Name)
			proxied = proxied || l.Proxied
		}
	}
	return names, proxied
}

// owedWork lists what the live services still owe, read from the tables
// and the wire: committed events a consumer id a live service reads as has
// not applied, and outbox rows marked published whose publish no proxy saw
// while the relay runs (a client that marks before its delivery report
// still holds the record: judging now would call it lost). An inbox row
// counts for an event by its event id (the payload's, where the mapping
// says) or by carrying the event's payload: a consumer keyed by another
// identity still applied it; the checker sorts that out.
func owedWork(ctx context.Context, env *steps.Env, run *sysrun.Run, live []sysrun.Live, consumer string) (owed, keys []string, err error) {
	wire := run.Wire() // this look's: who read as what, the publishes, what was moved aside
	readers := consumersOf(live, consumer, wire.ReadAs())
	relays, proxied := producersOf(live)
	if len(readers) == 0 && len(relays) == 0 {
		return nil, nil, nil
	}
	m := env.Mapping()
	outbox, err := state.OutboxOf(ctx, env.Producer, m)
	if err != nil {
		return nil, nil, fmt.Errorf("read the outbox: %w", err)
	}
	if len(relays) > 0 && proxied {
		owed = append(owed, unflushed(outbox, wire.Ops(), relays)...)
	}
	if len(readers) == 0 {
		return owed, nil, nil
	}
	inbox, err := state.InboxesOf(ctx, env.Consumer, m)
	if err != nil {
		return nil, nil, err
	}
	dead, err := deadLettered(ctx, env, wire)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range slices.Sorted(maps.Keys(readers)) {
		var missing []string
		for _, r := range outbox {
			if r.Published && !dead[r.EventID] && !appliedBy(inbox[c], r) {
				missing = append(missing, r.EventID)
				keys = append(keys, c+"/"+r.EventID)
			}
		}
		if len(missing) > 0 {
			owed = append(owed, fmt.Sprintf("%d published event(s) not applied by consumer %s yet (%s) while service %s runs",
				len(missing), c, firstFew(missing), strings.Join(readers[c], ", ")))
		}
	}
	return owed, keys, nil
}

// deadLettered are the events nobody owes any more: in the broker's own
// dead letters (a delivery limit), or published by a consumer to the
// system file's dead_letter: destination.
func deadLettered(ctx context.Context, env *steps.Env, wire *sysrun.Wire) (map[string]bool, error) {
	out := map[string]bool{}
	for ev, p := range wire.MovedAside() {
		if strings.HasSuffix(p.Op, sysrun.DeadLetterOp) {
			out[ev] = true
		}
	}
	dls, err := env.Broker.DeadLetters(ctx) // as the checker reads them (history.LoadStateOf)
	if err != nil {
		return nil, fmt.Errorf("read the dead letters: %w", err)
	}
	for _, dl := range dls {
		out[dl.EventID] = true
	}
	return out, nil
}

// appliedBy reports whether an inbox (event id → payload) holds r.
func appliedBy(inbox map[string]string, r state.OutboxRow) bool {
	if _, ok := inbox[r.EventID]; ok {
		return true
	}
	for _, p := range inbox {
		if history.SamePayload(p, r.Payload) {
			return true
		}
	}
	return false
}

// unflushed: outbox rows marked published that no proxy saw published.
func unflushed(outbox []state.OutboxRow, ops []history.Op, relays []string) []string {
	seen := map[string]bool{}
	for _, op := range ops {
		if op.Kind == history.Publish {
			seen[op.EventID] = true
		}
	}
	var missing []string
	for _, r := range outbox {
		if r.Published && !seen[r.EventID] {
			missing = append(missing, r.EventID)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d event(s) marked published whose publish no broker proxy saw yet (%s) while service %s, which uses the producer's database, runs: its client may still hold them",
		len(missing), firstFew(missing), strings.Join(relays, ", "))}
}

func firstFew(ids []string) string {
	if len(ids) > 3 {
		return strings.Join(ids[:3], ", ") + fmt.Sprintf(" and %d more", len(ids)-3)
	}
	return strings.Join(ids, ", ")
}

// progressOf is what the checker needs to judge stuck: who ran at the
// end, each described by its process, what its database connections wait
// on (read from the server at a full settle only: pools are the
// producer's and the consumer's) and its last lines, and whether
// settling gave them the whole limit.
func progressOf(ctx context.Context, pools [2]*pgxpool.Pool, run *sysrun.Run, wire *sysrun.Wire, s *Settled, consumer string) *history.Progress {
	p := &history.Progress{Consumers: map[string][]string{}, Full: s.Full, Limit: s.Limit.Round(time.Millisecond), Aside: map[string]string{}}
	if !s.Full {
		p.EarlyWhy = fmt.Sprintf("settling ended after %s, before its limit, because it found nothing owed: it counts an event applied by its id or by an inbox row carrying its payload, and the checker, tracing each inbox row to its event, does not agree for this one", s.Took.Round(time.Millisecond))
	}
	said := map[string]sysrun.Output{}
	for _, o := range run.Outputs() {
		said[o.Service] = o // the latest process of each service
	}
	dbs := map[string][2]sysrun.DBState{}
	for _, l := range s.Live {
		dbs[l.Name] = l.DB
	}
	var waits map[string][2]string
	if s.Full {
		waits = dbWaits(ctx, pools, s.Live)
	}
	gaveUp := map[string]int{}
	for _, l := range s.Live {
		gaveUp[l.Name] = l.GaveUp
	}
	describe := func(name string) string {
		var db []string
		if n := gaveUp[name]; n > 0 {
			db = append(db, fmt.Sprintf("its supervisor gave up after %d restarts in a row", n))
		}
		for i, d := range dbs[name] {
			if d.Used {
				say := []string{"producer_db", "consumer_db"}[i] + ": " + d.String()
				if w := waits[name][i]; w != "" {
					say += ": " + w
				}
				db = append(db, say)
			}
		}
		o, ok := said[name]
		if !ok {
			return fmt.Sprintf("service %s (%s)", name, strings.Join(db, "; "))
		}
		parts := append([]string{fmt.Sprintf("pid %d, started at %s, %s", o.PID, o.Start, o.Ended)}, db...)
		return fmt.Sprintf("service %s (%s; its last lines: %s)", name, strings.Join(parts, "; "), lastLines(o.Text, 3))
	}
	for c, names := range consumersOf(s.Live, consumer, wire.ReadAs()) {
		for _, n := range names {
			p.Consumers[c] = append(p.Consumers[c], describe(n))
		}
	}
	relays, _ := producersOf(s.Live)
	for _, n := range relays {
		p.Relays = append(p.Relays, describe(n))
	}
	return p
}

// lastLines are the last n non-empty lines of text, quoted, one run.
func lastLines(text string, n int) string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return "none"
	}
	lines = lines[max(len(lines)-n, 0):]
	for i, l := range lines {
		if len(l) > 200 {
			l = l[:200] + "…"
		}
		lines[i] = fmt.Sprintf("%q", l)
	}
	return strings.Join(lines, " | ")
}
