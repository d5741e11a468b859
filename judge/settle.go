package judge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// Settling watches the durable state every settlePoll; it counts as quiet
// once nothing in it changed for settleQuiet, or earlier once the services'
// own activity says they are idle (settling.idle).
const (
	settlePoll  = 50 * time.Millisecond
	settleQuiet = 300 * time.Millisecond
)

// Settled is what settling a team's system found.
type Settled struct {
	OK   bool
	Took time.Duration
	// Why: not settled, what still moved or waited when the limit struck.
	Why string
	// Untaken are, per consumer group, the entries still pending that a
	// live reader of the group left alone for longer than it would take to
	// claim them: the evidence for stranded.
	Untaken map[string][]history.Pending
	// Undecided are, per group, the pending entries settling could not
	// decide about (not idle long enough when the limit struck), each with
	// why.
	Undecided map[string][]history.Pending
	// Readers are the groups a live service read as at the end.
	Readers map[string]bool
	// Live are the services still running at the end.
	Live []sysrun.Live
	// Full: settling ran to its limit (Limit, raised to what the services
	// announced to the broker) with work still owed (Owed): the running
	// system had all that time to finish it, and did not. The evidence for
	// stuck.
	Full  bool
	Limit time.Duration
	Owed  []string
	// Raised says why the limit was raised past the one asked for.
	Raised string
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
// will still change anything, and no running service still owes work.
// That is, once the durable state stood still for settleQuiet and
//   - the outbox holds nothing unpublished while a service that uses the
//     producer's database runs (the relay will still publish it),
//   - no consumer group a live service reads has entries not yet handed out,
//   - every committed event is applied by each consumer id a live service
//     reads as (owed),
//   - no outbox row is marked published whose publish no proxy saw while
//     the relay runs (a client that marks before its delivery report still
//     holds the record in its queue),
//   - every live consumer has read from the broker at least once,
//   - every pending entry of a group a live service reads was taken again
//     (the consumer retries it) or stayed idle past the time the reader
//     would have claimed it (then it is untaken: the evidence for
//     stranded).
//
// At the limit, a quiet state is settled whatever is still owed or soft:
// the running system had the whole limit, and what it still owes then is
// judged (stuck, stranded), not waited for. The limit is raised to cover
// the timers the services announced to the broker (broker.Patient): before
// a session timeout ran out, the broker has not acted for a dead member
// yet. A state that still moved, or a service being restarted, is not
// settled, and is not judged.
func settle(ctx context.Context, env *steps.Env, run *sysrun.Run, limit time.Duration, consumer string) (Settled, error) {
	s := newSettling(ctx, env, run, limit, consumer)
	// A read that hangs must not hold settling past its limit.
	rctx, cancel := context.WithDeadline(ctx, s.start.Add(s.cap+2*time.Second))
	defer cancel()
	for polls := 0; ; polls++ {
		out, done, err := s.poll(rctx, polls)
		if err != nil {
			return Settled{}, err // its failure is said under the key settle
		}
		if done {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return Settled{}, context.Cause(ctx)
		case <-time.After(settlePoll):
		}
	}
}

// settling is one settle under way: what it watches, and what it saw of
// the durable state so far.
type settling struct {
	env      *steps.Env
	run      *sysrun.Run
	consumer string
	// ins: a broker whose pending entries are read one by one (Redis) is
	// settled entry by entry; nil: another, on what its groups have not
	// finished with (broker.Lagging).
	ins        broker.Inspector
	w          *watch
	start      time.Time
	limit, cap time.Duration
	last       fingerprint
	lastChange time.Time
	moved      []string // what changed last
	cpu        cpuWaits
}

func newSettling(ctx context.Context, env *steps.Env, run *sysrun.Run, limit time.Duration, consumer string) *settling {
	cap := limit + maxRaise
	if dl, ok := ctx.Deadline(); ok {
		cap = min(cap, max(time.Until(dl)-time.Second, 0)) // leave the scenario's timeout time to judge
		limit = min(limit, cap)
	}
	ins, _ := env.Broker.(broker.Inspector)
	return &settling{env: env, run: run, consumer: consumer, ins: ins, start: time.Now(), limit: limit, cap: cap,
		w:   &watch{first: map[string]int64{}, retaken: map[string]bool{}, inTx: map[string]int{}, busySince: map[string]time.Time{}, owed: map[string]time.Time{}, limit: limit},
		cpu: newCPUWaits(run.CPUWaits, limit)}
}

// poll looks at the state once; done, with the outcome, when settling
// ends here.
func (s *settling) poll(ctx context.Context, polls int) (out Settled, done bool, err error) {
	fp, groups, err := readFingerprint(ctx, s.env, s.ins)
	var lag map[string]int64
	if err == nil && s.ins == nil {
		lag, err = readLag(ctx, s.env, &fp)
	}
	if err != nil {
		return Settled{}, false, err
	}
	now := time.Now()
	if polls == 0 || fp != s.last {
		if polls > 0 {
			s.moved = s.last.changed(fp)
		}
		s.last, s.lastChange = fp, now
	}
	live := s.run.Live()
	v, err := s.w.look(ctx, s.ins, fp, groups, live)
	if s.ins == nil {
		v.soft = append(v.soft, lagging(lag, live)...)
	}
	if err != nil {
		return Settled{}, false, err
	}
	if s.run.Holding() {
		// A delay fault holds a reply: the service is mid-call. Waited
		// for up to the limit; one that outlasts it is the fault's to
		// report (still holding when the scenario ended).
		v.soft = append(v.soft, "a delay fault holds a reply")
	}
	if v.retaken {
		// A claim leaves the counts as they were, but the consumer now
		// works on the entry: give it the quiet time to finish.
		s.lastChange, s.moved = now, []string{"a pending entry (taken again)"}
	}
	quiet := now.Sub(s.lastChange) >= settleQuiet || len(live) == 0 || idle(now, s.lastChange, s.run.Holding(), live)
	if len(v.hard) == 0 && len(v.owed) == 0 && (quiet || polls%10 == 0) {
		if err := s.readOwed(ctx, fp, now, live, &v); err != nil {
			return Settled{}, false, err
		}
	}
	out, done = s.outcome(now, quiet, live, v)
	return out, done, nil
}

// idle: the quiet window ends before settleQuiet (its upper bound) when
// what the services did since the state last changed says they are idle:
// the state stood still for at least one more look, no delay fault holds
// a reply, no service is being restarted or holds a transaction open, and
// every live service but a producer-side one (whose work is what the
// outbox still owes, judged apart) sent the broker a read of new work
// after the change that handed out nothing (broker.Idler: Redis, NATS). A
// consumer that polled idle had finished with what it held, and found
// nothing more. Without that evidence from every one (a proxy that cannot
// tell, a consumer that never polls), the whole window is waited.
func idle(now, lastChange time.Time, holding bool, live []sysrun.Live) bool {
	if now.Sub(lastChange) < settlePoll || holding {
		return false
	}
	readers := 0
	for _, l := range live {
		switch {
		case l.Restarting || len(l.InTx) > 0:
			return false
		case l.Producer && !l.Consumer:
			continue
		case !l.IdlePoll.After(lastChange):
			return false
		}
		readers++
	}
	return readers > 0
}

// readOwed sets what the tables and the wire say is still owed: read once
// all else is done, and every half second meanwhile (when an event was
// first owed decides how long it gets); a still state's answer is reused
// for 250 ms (it decodes every proxy's record).
func (s *settling) readOwed(ctx context.Context, fp fingerprint, now time.Time, live []sysrun.Live, v *view) error {
	w := s.w
	if fp != w.owedFP || now.Sub(w.owedAt) >= 250*time.Millisecond {
		owed, keys, err := owedWork(ctx, s.env, s.run, live, s.consumer)
		if err != nil {
			return err
		}
		w.owedFP, w.owedAt, w.owedLast = fp, now, owed
		w.owing(keys, now)
	}
	v.owed = w.owedLast
	return nil
}

// outcome is how settling ends at this look, done false while it goes on.
func (s *settling) outcome(now time.Time, quiet bool, live []sysrun.Live, v view) (Settled, bool) {
	start, limit := s.start, s.limit
	end, raised := deadline(start, now, limit, s.cap, s.lastChange, s.run, live)
	if at := s.w.lastOwed.Add(limit); at.After(end) && !at.After(start.Add(s.cap)) {
		// An event first owed late in settling (a relay back from its
		// backoff) gets the whole limit too, as stuck claims of it.
		end, raised = at, fmt.Sprintf("raised from %s to %s: an event first owed %s into settling gets the whole %s", limit, at.Sub(start).Round(time.Millisecond), s.w.lastOwed.Sub(start).Round(time.Millisecond), limit)
	}
	end, raised = s.cpu.raise(end, start.Add(s.cap), limit, start, raised)
	out := Settled{Took: now.Sub(start), Untaken: v.untaken, Readers: readers(live), Live: live, Limit: end.Sub(start), Raised: raised}
	switch {
	case quiet && len(v.hard) == 0 && len(v.soft) == 0 && len(v.owed) == 0:
		// What stays pending in a retry loop of an applied event (an
		// identity conflict left pending) is not judged stranded: the
		// consumer keeps taking it.
		out.OK, out.Undecided = true, v.undecided
		return out, true
	case !now.Before(end) && end.Before(start.Add(s.cap)) && s.cpu.grew(live, s.owing(quiet, v), start, now):
		return out, false // the services waited for a CPU meanwhile: that time is theirs
	case !now.Before(end) && quiet && len(v.hard) == 0:
		// Nothing moves: what is still owed or pending stays; judge it.
		// A delay fault still holding a reply is the drill's doing,
		// reported as such: nothing owed is judged stuck behind it.
		out.OK, out.Full, out.Undecided = true, len(v.owed) > 0 && !s.run.Holding(), v.undecided
		if out.Full {
			out.Owed = append(v.owed, v.soft...)
		}
		return out, true
	case !now.Before(end):
		waits := append(append(v.hard, v.owed...), v.soft...)
		if !quiet {
			waits = append(waits, fmt.Sprintf("%s changed %s before the limit", strings.Join(s.moved, " and "), now.Sub(s.lastChange).Round(time.Millisecond)))
		}
		out.Why = strings.Join(waits, "; ")
		return out, true
	}
	return out, false
}

// owing is which side still owes work at this look (cpuWaits).
func (s *settling) owing(quiet bool, v view) owing {
	others := len(v.owed) // what is owed beside the outbox's events
	if v.outboxOwed {
		others--
	}
	return owing{producer: v.outboxOwed || !quiet, consumer: !quiet || others > 0 || len(v.soft) > 0 || len(v.hard) > 0}
}

// maxRaise bounds how far the timers the services announced may raise
// the settle limit: a consumer announcing a session timeout of an hour is
// judged at limit + maxRaise, and the limit says so.
const maxRaise = 2 * time.Minute

// deadline is when settling ends: the limit, or later when the services
// announced timers to the broker (broker.Patient) that have not run out
// since the state last changed — the broker has not acted for them yet
// (a dead member's session, an unacked message's AckWait) — or when a
// service still owing work was started again while settling (its
// supervisor restarted it after a crash): it gets the whole limit too, as
// stuck claims of it. Never past cap.
func deadline(start, now time.Time, limit, cap time.Duration, lastChange time.Time, run *sysrun.Run, live []sysrun.Live) (time.Time, string) {
	base := start.Add(limit)
	end := base
	var whys []string // every reason that reaches past the limit, not only the last
	raise := func(at time.Time, why string) {
		if at.After(base) {
			whys = append(whys, why)
		}
		if at.After(end) {
			end = at
		}
	}
	for _, w := range run.Waits() {
		raise(lastChange.Add(w.For+time.Second), fmt.Sprintf("%s %s", w.What, w.For))
	}
	for _, l := range live {
		if l.Restarting {
			// Not a steady state: its supervisor's next process is on its
			// way (its ready timeout bounds that), and gets the limit once
			// it runs.
			raise(now.Add(settlePoll), fmt.Sprintf("service %s is being restarted by its supervisor", l.Name))
		}
		if l.Consumer || l.Producer {
			raise(l.Since.Add(limit), fmt.Sprintf("service %s started again %s into settling, and gets the whole %s", l.Name, l.Since.Sub(start).Round(time.Millisecond), limit))
		}
	}
	if hard := start.Add(cap); end.After(hard) {
		end = hard
	}
	if len(whys) > 0 {
		return end, fmt.Sprintf("raised from %s to %s: %s, and the state last changed %s in", limit, end.Sub(start).Round(time.Millisecond), strings.Join(whys, "; "), lastChange.Sub(start).Round(time.Millisecond))
	}
	return end, ""
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

// readFingerprint reads the fingerprint, and on a broker.Inspector (Redis)
// the groups it was made of (what settling then looks at, read once per
// poll).
func readFingerprint(ctx context.Context, env *steps.Env, ins broker.Inspector) (fingerprint, []broker.Group, error) {
	var fp fingerprint
	m := env.Mapping()
	if err := env.Producer.QueryRow(ctx, m.OutboxFingerprint()).Scan(&fp.outbox, &fp.unpublished, &fp.outboxSum); err != nil {
		return fp, nil, fmt.Errorf("read the outbox: %w", err)
	}
	if err := env.Consumer.QueryRow(ctx, m.InboxFingerprint()).Scan(&fp.inbox, &fp.inboxSum); err != nil {
		return fp, nil, fmt.Errorf("read the inbox: %w", err)
	}
	if m.Projection != "" {
		if err := env.Consumer.QueryRow(ctx, m.ProjectionFingerprint()).Scan(&fp.proj, &fp.projSum); err != nil {
			return fp, nil, fmt.Errorf("read the projection: %w", err)
		}
	}
	caps := env.Broker.Capabilities()
	if caps.Has(broker.EntryLog) {
		n, err := env.Broker.Entries(ctx)
		if err != nil {
			return fp, nil, err
		}
		fp.entries = n
	}
	var gs []string
	var groups []broker.Group
	switch {
	case ins != nil:
		var err error
		groups, err = ins.Groups(ctx)
		if err != nil {
			return fp, nil, err
		}
		for _, g := range groups {
			gs = append(gs, fmt.Sprintf("%s:%d:%d", g.Name, g.Pending, g.Undelivered))
		}
	case caps.Has(broker.PendingCount):
		pending, err := env.Broker.Pending(ctx)
		if err != nil {
			return fp, nil, err
		}
		for g, n := range pending {
			gs = append(gs, fmt.Sprintf("%s:%d", g, n))
		}
	}
	slices.Sort(gs)
	fp.groups = strings.Join(gs, ",")
	return fp, groups, nil
}

// readLag reads, on a broker that counts it and whose pending entries are
// not read one by one (no broker.Inspector), what each consumer group has
// not finished with, and adds it to fp.groups.
func readLag(ctx context.Context, env *steps.Env, fp *fingerprint) (map[string]int64, error) {
	l, ok := env.Broker.(broker.Lagging)
	if !ok || !env.Broker.Capabilities().Has(broker.GroupLag) {
		return nil, nil
	}
	lag, err := l.Lag(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the consumer groups' lag: %w", err)
	}
	for _, g := range slices.Sorted(maps.Keys(lag)) {
		fp.groups += fmt.Sprintf(",lag %s:%d", g, lag[g])
	}
	return lag, nil
}

// lagging: a group with entries it has not finished with (not yet
// delivered, or delivered and not acknowledged) while a consumer runs is
// work the consumer may still do: waited for, up to the limit (a message
// a correct consumer retries for ever stays, and is then judged as is).
func lagging(lag map[string]int64, live []sysrun.Live) []string {
	var consumers []string
	for _, l := range live {
		if l.Consumer {
			consumers = append(consumers, l.Name)
		}
	}
	if len(consumers) == 0 {
		return nil
	}
	var out []string
	for _, g := range slices.Sorted(maps.Keys(lag)) {
		if lag[g] > 0 {
			out = append(out, fmt.Sprintf("group %s has %d entr(ies) it has not finished with, as the broker counts them, and service %s runs", g, lag[g], strings.Join(consumers, ", ")))
		}
	}
	return out
}

// watch remembers, across polls, what settling saw of pending entries.
type watch struct {
	first map[string]int64 // group/entry → deliveries when first seen pending
	inTx  map[string]int   // service → polls in a row it was inside a transaction
	// owedNow: the consumer/event keys owed at the latest read of it.
	owedNow map[string]bool
	// busySince: service → since when it has held a transaction open on
	// the consumer's database, or waited for its answer, without a break.
	busySince map[string]time.Time
	// owed: consumer/event → when settling first saw it owed; lastOwed the
	// latest of those times among what is owed now.
	owed     map[string]time.Time
	lastOwed time.Time
	// The last owedWork: the fingerprint it read, when, and its answer.
	owedFP   fingerprint
	owedAt   time.Time
	owedLast []string
	retaken  map[string]bool // group/entry → taken again since first seen
	limit    time.Duration
}

// view is one look at what live services may still do.
type view struct {
	hard, soft []string // what a live service will still do, or may
	// owed is work a running service has not done yet: judged (stuck)
	// when the limit strikes on a quiet state, not waited for past it.
	owed       []string
	outboxOwed bool // owed[0] is the outbox's unpublished events
	untaken    map[string][]history.Pending
	undecided  map[string][]history.Pending
	// retaken: an entry was taken again for the first time since settling
	// began (a restarted consumer claimed what its predecessor left):
	// the consumer works on it now, as after any change of the state.
	retaken bool
}

// owing notes when each owed consumer/event was first seen owed, and the
// latest such time among those owed now.
func (w *watch) owing(keys []string, now time.Time) {
	w.lastOwed = time.Time{}
	w.owedNow = map[string]bool{}
	for _, k := range keys {
		w.owedNow[k] = true
		if _, ok := w.owed[k]; !ok {
			w.owed[k] = now
		}
		if w.owed[k].After(w.lastOwed) {
			w.lastOwed = w.owed[k]
		}
	}
}

// look lists what a live service may still do and sorts the pending
// entries of the groups live services read.
func (w *watch) look(ctx context.Context, ins broker.Inspector, fp fingerprint, groups []broker.Group, live []sysrun.Live) (view, error) {
	v := view{untaken: map[string][]history.Pending{}, undecided: map[string][]history.Pending{}}
	for _, l := range live {
		if l.Restarting {
			v.hard = append(v.hard, fmt.Sprintf("service %s is being restarted by its supervisor", l.Name))
		}
	}
	for _, l := range live {
		w.inTx[l.Name]++
		if len(l.InTx) == 0 {
			w.inTx[l.Name] = 0
		}
		// One poll inside a transaction is a service at work between two
		// polls (a relay's 25 ms loop); two in a row, one that holds it.
		if w.inTx[l.Name] >= 2 {
			// Soft: one a service leaves open for ever (idle in
			// transaction) is waited for up to the limit, then judged.
			v.soft = append(v.soft, fmt.Sprintf("service %s holds a transaction open on %s", l.Name, strings.Join(l.InTx, " and ")))
		}
		w.busyOn(l, time.Now())
		for i, d := range l.Awaiting {
			if d >= awaitSoft {
				// Soft, as a transaction held open: a statement blocked for
				// ever (on a lock) is waited for up to the limit, then judged.
				v.soft = append(v.soft, fmt.Sprintf("service %s has waited %s for the server's answer on %s", l.Name, d.Round(time.Millisecond), []string{"producer_db", "consumer_db"}[i]))
			}
		}
	}
	for _, l := range live {
		if l.Producer && fp.unpublished > 0 {
			v.owed = append(v.owed, fmt.Sprintf("the outbox holds %d unpublished event(s) and service %s, which uses the producer's database, runs", fp.unpublished, l.Name))
			v.outboxOwed = true
			break
		}
	}
	if ins == nil {
		return v, nil
	}
	for _, l := range live {
		if l.Consumer && l.Seen && len(l.Groups) == 0 {
			v.soft = append(v.soft, fmt.Sprintf("service %s, which uses the consumer's database and the broker, has not read from the broker yet", l.Name))
		}
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
			v.owed = append(v.owed, fmt.Sprintf("group %s has entries not handed out yet and %s reads it", g.Name, who))
		}
		if g.Pending > 0 {
			claim, claims := sysrun.ClaimIdle(live, g.Name)
			if err := w.pending(ctx, ins, g.Name, who, claim, claims, w.working(names), &v); err != nil {
				return v, err
			}
		}
	}
	return v, nil
}

// pending sorts group's pending entries: one idle past the time a live
// reader would have claimed it (twice its claim idle and a second; half the
// settle limit, at least a second, when it never claims) is untaken; one
// taken again since settling began is in a retry loop (steady); any other
// is still waited for. Not the whole limit for a reader that never claims:
// the entry it refused after the last step (its own start, say) was
// delivered after settling began and could never be idle that long, so
// the no-retry consumer was never judged (neverClaimWatch).
//
// While a reader of the group has held a transaction open on the
// consumer's database, or waited for its answer, ever since about when an
// entry was handed (working), and the entry's event is not applied yet, the
// entry is not taken for left alone: a consumer blocked mid-transaction (on
// a lock another session holds) is at work on what it was handed, and what
// it still owes at the limit is stuck, its witness saying what its
// connection waits on. An applied event's entry left pending is stranded
// as ever: nothing would judge it otherwise.
func (w *watch) pending(ctx context.Context, ins broker.Inspector, group, who string, claim time.Duration, claims bool, working func(idle time.Duration) string, v *view) error {
	pend, err := ins.PendingEntries(ctx, group)
	if err != nil {
		return err
	}
	threshold, how := neverClaimWatch(w.limit), "it never claims"
	if claims {
		threshold, how = 2*claim+time.Second, fmt.Sprintf("it claims entries idle for %s", claim)
	}
	for _, p := range pend {
		k := group + "/" + p.ID
		d0, seen := w.first[k]
		if !seen {
			w.first[k], d0 = p.Deliveries, p.Deliveries
		}
		if p.Deliveries > d0 && !w.retaken[k] {
			w.retaken[k], v.retaken = true, true // later retries are a steady retry loop, not work
		}
		if w.retaken[k] && p.Idle < threshold {
			// Taken again while settling: not stranded, whatever comes of
			// it (a retry loop that never ends is stuck, judged from the
			// inbox, not from the pending list).
			continue
		}
		hp := history.Pending{EntryID: p.ID, EventID: p.EventID, Holder: p.Consumer, Idle: p.Idle, Deliveries: p.Deliveries}
		if busy := working(p.Idle); p.Idle >= threshold && busy != "" && w.owedNow[group+"/"+p.EventID] {
			hp.Why = fmt.Sprintf("still pending, idle %s when settling ended: service %s, which reads the group, has held a transaction open on the consumer's database or waited for its answer ever since it was handed (at work on it, or blocked)", p.Idle.Round(time.Millisecond), busy)
			v.undecided[group] = append(v.undecided[group], hp)
			continue
		}
		if p.Idle >= threshold {
			hp.Why = fmt.Sprintf("%s reads the group and left it alone for %s (%s)", who, p.Idle.Round(time.Millisecond), how)
			v.untaken[group] = append(v.untaken[group], hp)
			continue
		}
		hp.Why = fmt.Sprintf("still pending, idle %s when settling ended: %s may still take it (%s); a longer settle: decides", p.Idle.Round(time.Millisecond), who, how)
		v.undecided[group] = append(v.undecided[group], hp)
		if p.Deliveries == d0 {
			v.soft = append(v.soft, fmt.Sprintf("entry %s of group %s is pending (idle %s) and %s may still take it", p.ID, group, p.Idle.Round(time.Millisecond), who))
		}
	}
	return nil
}

// awaitSoft is how long a connection must have waited for the server's
// answer to be soft: two looks, not a statement in passing.
const awaitSoft = 2 * settlePoll

// workSlack is how long after an entry was handed its reader may have
// become busy on the consumer's database and still be at work on it (its
// BEGIN and first statement).
const workSlack = time.Second

// busyOn notes, at now, whether l holds a transaction open on the
// consumer's database or waits for its answer, and since when.
func (w *watch) busyOn(l sysrun.Live, now time.Time) {
	busy := slices.Contains(l.InTx, "consumer_db") || l.Awaiting[1] >= awaitSoft
	if !busy {
		delete(w.busySince, l.Name)
		return
	}
	since, ok := w.busySince[l.Name]
	if from := now.Add(-l.Awaiting[1]); !ok || l.Awaiting[1] > 0 && from.Before(since) {
		since = from
	}
	w.busySince[l.Name] = since
}

// working is, for an entry idle this long, the first of names (a group's
// live readers) busy on the consumer's database without a break since
// about when the entry was handed: at work on it, or blocked on it; ""
// for none. A reader busy only now (a routine short transaction) is not.
func (w *watch) working(names []string) func(idle time.Duration) string {
	return func(idle time.Duration) string {
		for _, name := range names {
			if since, ok := w.busySince[name]; ok && !since.After(time.Now().Add(-idle).Add(workSlack)) {
				return name
			}
		}
		return ""
	}
}

// neverClaimWatch is how long an entry must have stayed idle, with a live
// reader that never claims, to be untaken: half the settle limit, at least
// a second — long enough for a retry loop to show (a retry takes it again
// and it stays undecided), short enough that one delivered while settling
// is decided within the limit.
func neverClaimWatch(limit time.Duration) time.Duration {
	return max(time.Second, limit/2)
}

// groupsOf lists the groups of untaken entries, sorted.
func groupsOf(m map[string][]history.Pending) []string { return slices.Sorted(maps.Keys(m)) }

// Settle settles a team's system after the last step (a fault may still
// strike meanwhile); one that does not settle within limit fails the
// scenario naming what still moved, and is not judged.
func Settle(ctx context.Context, env *steps.Env, run *sysrun.Run, res *report.Result, limit time.Duration) *Settled {
	s, err := settle(ctx, env, run, limit, consumerOf(res.Scenario))
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
	switch {
	case s.Full:
		res.Settled = fmt.Sprintf("stood still at the %s limit with work owed: %s", s.Limit.Round(time.Millisecond), strings.Join(s.Owed, "; "))
	case len(groupsOf(s.Untaken)) > 0:
		res.Settled += fmt.Sprintf(" (at the %s limit, with entries pending that no running consumer took again)", limit)
	}
	if s.Raised != "" && s.Took > limit {
		res.Settled += " (limit " + s.Raised + ")"
	}
	return &s
}
