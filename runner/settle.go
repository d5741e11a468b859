package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// DefaultSettle is how long a team's system may take to settle after the
// last step before it is judged (--settle, a scenario's settle:).
const DefaultSettle = 5 * time.Second

// Settling watches the durable state every settlePoll; it counts as quiet
// once nothing in it changed for settleQuiet.
const (
	settlePoll  = 50 * time.Millisecond
	settleQuiet = 300 * time.Millisecond
)

// settled is what settling a team's system found.
type settled struct {
	OK   bool
	Took time.Duration
	// Why: not settled, what still moved or waited when the limit struck.
	Why string
	// Untaken are, per consumer group, the entries still pending that a
	// live reader of the group never took again while the system settled.
	Untaken map[string][]history.Pending
	// Readers are the groups a live service read as at the end.
	Readers map[string]bool
}

// fingerprint is the durable state settling watches: the outbox, the
// inbox and the read models as their mapped columns show them, and what
// the broker holds per group.
type fingerprint struct {
	outbox, unpublished int64
	outboxSum, inboxSum string
	projSum             string
	inbox, proj         int64
	entries             int64
	groups              string // name:pending:undelivered, sorted
}

// settle waits until the team's system is quiescent: no started service
// will still change anything. That is, once the durable state stood still
// for settleQuiet and
//   - the outbox holds nothing unpublished while a service that uses the
//     producer's database runs (the relay will still publish it),
//   - no consumer group a live service reads has entries not yet handed out,
//   - every pending entry of such a group was either taken again (the
//     consumer retries it) or is left after the limit: then it is
//     untaken, the evidence for stranded.
//
// A state that still moved when the limit struck is not settled, and is
// not judged.
func settle(ctx context.Context, env *steps.Env, run *sysrun.Run, limit time.Duration) (settled, error) {
	start := time.Now()
	deadline := start.Add(limit)
	rs, _ := env.Broker.(*redisstream.Stream)
	first := map[string]int64{} // group/entry → deliveries when first seen pending
	var last fingerprint
	var lastChange time.Time
	var moved []string // what changed last
	for polls := 0; ; polls++ {
		fp, err := readFingerprint(ctx, env, rs)
		if err != nil {
			return settled{}, fmt.Errorf("settle: %w", err)
		}
		now := time.Now()
		if polls == 0 || fp != last {
			if polls > 0 {
				moved = last.changed(fp)
			}
			last, lastChange = fp, now
		}
		live := run.Live()
		waits, untaken, err := waiting(ctx, env, rs, fp, live, first)
		if err != nil {
			return settled{}, fmt.Errorf("settle: %w", err)
		}
		quiet := now.Sub(lastChange) >= settleQuiet || len(live) == 0
		out := settled{Took: now.Sub(start), Untaken: untaken, Readers: readers(live)}
		switch {
		case quiet && len(waits) == 0:
			out.OK = true
			return out, nil
		case !now.Before(deadline) && quiet && onlyPending(waits):
			out.OK = true // nothing moves; what is pending stays: judge it
			return out, nil
		case !now.Before(deadline):
			if !quiet {
				waits = append(waits, fmt.Sprintf("%s changed %s before the limit", strings.Join(moved, " and "), now.Sub(lastChange).Round(time.Millisecond)))
			}
			out.Why = strings.Join(waits, "; ")
			return out, nil
		}
		select {
		case <-ctx.Done():
			return settled{}, context.Cause(ctx)
		case <-time.After(settlePoll):
		}
	}
}

// pendingWait prefixes what settling waits for on a pending entry.
const pendingWait = "pending: "

func onlyPending(waits []string) bool {
	for _, w := range waits {
		if !strings.HasPrefix(w, pendingWait) {
			return false
		}
	}
	return true
}

func readers(live []sysrun.Live) map[string]bool {
	out := map[string]bool{}
	for _, l := range live {
		for _, g := range l.Groups {
			out[g] = true
		}
	}
	return out
}

// changed names what differs between two fingerprints.
func (fp fingerprint) changed(next fingerprint) []string {
	var out []string
	add := func(differs bool, what string) {
		if differs {
			out = append(out, what)
		}
	}
	add(fp.outbox != next.outbox || fp.outboxSum != next.outboxSum || fp.unpublished != next.unpublished, "the outbox")
	add(fp.inbox != next.inbox || fp.inboxSum != next.inboxSum, "the inbox")
	add(fp.proj != next.proj || fp.projSum != next.projSum, "the read model")
	add(fp.entries != next.entries, "the stream")
	add(fp.groups != next.groups, "the consumer groups (pending or undelivered entries)")
	return out
}

func readFingerprint(ctx context.Context, env *steps.Env, rs *redisstream.Stream) (fingerprint, error) {
	var fp fingerprint
	m := env.Mapping()
	if err := env.Producer.QueryRow(ctx, m.OutboxFingerprint()).Scan(&fp.outbox, &fp.unpublished, &fp.outboxSum); err != nil {
		return fp, fmt.Errorf("read the outbox: %w", err)
	}
	if err := env.Consumer.QueryRow(ctx, m.InboxFingerprint()).Scan(&fp.inbox, &fp.inboxSum); err != nil {
		return fp, fmt.Errorf("read the inbox: %w", err)
	}
	if m.Projection != "" {
		if err := env.Consumer.QueryRow(ctx, m.ProjectionFingerprint()).Scan(&fp.proj, &fp.projSum); err != nil {
			return fp, fmt.Errorf("read the projection: %w", err)
		}
	}
	caps := env.Broker.Capabilities()
	if caps.Has(broker.EntryLog) {
		n, err := env.Broker.Entries(ctx)
		if err != nil {
			return fp, err
		}
		fp.entries = n
	}
	var gs []string
	switch {
	case rs != nil:
		groups, err := rs.Groups(ctx)
		if err != nil {
			return fp, err
		}
		for _, g := range groups {
			gs = append(gs, fmt.Sprintf("%s:%d:%d", g.Name, g.Pending, g.Undelivered))
		}
	case caps.Has(broker.PendingCount):
		pending, err := env.Broker.Pending(ctx)
		if err != nil {
			return fp, err
		}
		for g, n := range pending {
			gs = append(gs, fmt.Sprintf("%s:%d", g, n))
		}
	}
	slices.Sort(gs)
	fp.groups = strings.Join(gs, ",")
	return fp, nil
}

// waiting lists what a live service may still do, and the pending entries
// nobody took again so far.
func waiting(ctx context.Context, env *steps.Env, rs *redisstream.Stream, fp fingerprint, live []sysrun.Live, first map[string]int64) ([]string, map[string][]history.Pending, error) {
	var waits []string
	for _, l := range live {
		if l.Producer && fp.unpublished > 0 {
			waits = append(waits, fmt.Sprintf("the outbox holds %d unpublished event(s) and service %s, which uses the producer's database, runs", fp.unpublished, l.Name))
			break
		}
	}
	untaken := map[string][]history.Pending{}
	if rs == nil {
		return waits, untaken, nil
	}
	groups, err := rs.Groups(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, g := range groups {
		names, unseen := sysrun.LiveReaders(live, g.Name)
		if len(names) == 0 && !unseen {
			continue // nobody runs who would take anything of it
		}
		who := "a service whose broker traffic the runner does not see"
		if len(names) > 0 {
			who = "service " + strings.Join(names, ", ")
		}
		if g.Undelivered > 0 {
			waits = append(waits, fmt.Sprintf("group %s has entries not handed out yet and %s reads it", g.Name, who))
		}
		if g.Pending == 0 {
			continue
		}
		pend, err := rs.PendingEntries(ctx, g.Name)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range pend {
			k := g.Name + "/" + p.ID
			d0, seen := first[k]
			if !seen {
				first[k], d0 = p.Deliveries, p.Deliveries
			}
			if p.Deliveries > d0 {
				continue // taken again: the consumer retries it
			}
			untaken[g.Name] = append(untaken[g.Name], history.Pending{EntryID: p.ID, EventID: p.EventID, Holder: p.Consumer, Idle: p.Idle, Deliveries: p.Deliveries})
			waits = append(waits, fmt.Sprintf("%sentry %s of group %s (idle %s): %s may still take it", pendingWait, p.ID, g.Name, p.Idle.Round(time.Millisecond), who))
		}
	}
	return waits, untaken, nil
}

// groupsOf lists the groups of untaken entries, sorted.
func groupsOf(m map[string][]history.Pending) []string { return slices.Sorted(maps.Keys(m)) }

// settleSystem settles a team's system after the last step; one that does
// not settle within limit fails the scenario naming what still moved, and
// is not judged.
func settleSystem(ctx context.Context, env *steps.Env, run *sysrun.Run, res *report.Result, limit time.Duration) *settled {
	s, err := settle(ctx, env, run, limit)
	if err != nil {
		res.Failures = append(res.Failures, steps.Failure{Pos: res.Scenario.Pos, Key: "settle", Msg: err.Error()})
		return nil
	}
	if !s.OK {
		res.Settled = fmt.Sprintf("did not settle within %s", limit)
		res.Failures = append(res.Failures, steps.Failure{Pos: res.Scenario.Pos, Key: "settle",
			Msg: fmt.Sprintf("the system did not settle within %s, so it is not judged: %s (raise the limit with settle: or --settle if it only needs longer)", limit, s.Why)})
		return &s
	}
	res.Settled = fmt.Sprintf("settled in %s", s.Took.Round(time.Millisecond))
	if n := len(groupsOf(s.Untaken)); n > 0 {
		res.Settled += fmt.Sprintf(" (at the %s limit, with entries pending that no running consumer took again)", limit)
	}
	return &s
}
