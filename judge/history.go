// Package judge is the verdict on one scenario's run: a team's system
// settled (Settle: the durable state stood still and no running service
// owes work) and its faults judged (Finish), then the history of what the
// steps and the services' broker proxies did checked against the final
// state, read in one snapshot per database (History, System).
package judge

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
)

// ops turns what the steps reported into the history the checker judges.
func ops(recs []report.StepRecord) []history.Op {
	var out []history.Op
	for i, st := range recs {
		where := fmt.Sprintf("%s (%s)", st.Call.Pos, st.Call)
		cons, consumes := st.Call.Consumes()
		if consumes {
			out = append(out, history.Op{Step: where, StepN: i, Kind: history.Pass, Consumer: cons.Consumer, TakesOver: cons.TakesOver})
		}
		for _, e := range st.Result.Entries {
			out = append(out, history.Op{Step: where, StepN: i, Kind: e.Outcome, EventID: e.EventID, EntryID: e.EntryID,
				Consumer: e.Consumer, Model: cons.Model, Payload: e.Payload, Acked: e.Acked, DLQ: e.DeadLettered, Nacked: e.Nacked, Republish: e.Republish})
		}
	}
	return out
}

// History checks a scenario of the reference pipeline that ran to its end
// as a whole. A violation fails it unless declared in expect_violations; a
// declared one that did not occur fails it too, so an anti-pattern
// scenario must show its damage.
func History(ctx context.Context, env *steps.Env, res *report.Result) error {
	return judge(ctx, env, res, ops(res.Steps), res.Scenario.Consumers(), res.Scenario.ReadModels())
}

// System judges a team's system once it settled: the producer's commits
// as the produce steps made them, the publishes, deliveries and acks as
// the services' broker proxies saw them (wire, Finish's), and the state
// read through the system file's mappings in one snapshot per database.
// Each consumer id is its own read model.
func System(ctx context.Context, env *steps.Env, run *sysrun.Run, wire *sysrun.Wire, res *report.Result, s *Settled) error {
	if s == nil || !s.OK {
		res.NotJudged = NotJudged("the system never settled")
		return nil
	}
	hist := append(ops(res.Steps), wire.Ops()...)
	consumers := wire.Consumers()
	for _, c := range append(append(groupsOf(s.Untaken), groupsOf(s.Undecided)...), consumerOf(res.Scenario)) {
		if !slices.Contains(consumers, c) {
			consumers = append(consumers, c)
		}
	}
	slices.Sort(consumers)
	models := map[string][]string{}
	for _, c := range consumers {
		models[c] = []string{c}
	}
	m := env.Mapping()
	team := &history.Team{EntryEvents: entryEvents(hist), Readers: s.Readers, Amount: m.AmountOf, EventOf: m.EventIDOf,
		Progress: progressOf(ctx, [2]*pgxpool.Pool{env.Producer, env.Consumer}, run, wire, s, consumerOf(res.Scenario)), Disruptions: disruptions(run, res.Steps)}
	return judgeWith(ctx, env, res, hist, consumers, models, func(st *history.State) {
		st.Team = team
		for g, ps := range s.Untaken {
			if cs := st.Consumers[g]; cs != nil {
				cs.Untaken = ps
			}
		}
		for g, ps := range s.Undecided {
			if cs := st.Consumers[g]; cs != nil {
				cs.Undecided = ps
			}
		}
		if l, ok := env.Broker.(broker.Lister); ok {
			if err := brokerListing(ctx, l, team); err != nil {
				st.NotJudged[history.Lost] = "the broker's entries could not be listed: " + err.Error()
			}
		}
		if len(st.Strangers) > 0 {
			why := fmt.Sprintf("the inbox holds rows for consumer id(s) %s, which no consumer group of the run read as (%s): does inbox.consumer in %s name the column that holds the group?",
				strings.Join(st.Strangers, ", "), strings.Join(consumers, ", "), res.Scenario.System.File)
			// Every invariant that reads the inbox by consumer id rests on
			// that column: none of them can be judged.
			for _, inv := range []string{history.AckedWithoutEffect, history.DoubleApplied, history.Gap, history.Lost, history.OutOfOrder, history.Phantom, history.ProjectionMismatch, history.Stranded, history.Stuck} {
				st.NotJudged[inv] = why
			}
		}
		for ev, p := range wire.MovedAside() {
			committed, ok := st.Outbox[ev]
			switch {
			case ok && strings.HasSuffix(p.Op, sysrun.DeadLetterOp) && history.SamePayload(p.Payload, committed):
				st.DeadLetters[ev] = true
			case ok:
				team.Progress.Aside[ev] = p.Op + " (not the system file's dead_letter: destination, so not taken for a dead letter: name it there if it is one)"
			}
		}
		wireNotJudged(st, res.Broker, wire)
		if wire.Copies() {
			team.Copies = st.Stream // the broker's own log, by event
		}
	})
}

// disruptions are what struck the team's system while it ran: the
// services' faults and ended processes (sysrun), and every step that
// faulted a server or the data under it (broker: restart, producer_db:
// kill, a produce that failed on purpose, …), from when it began to when
// it ended.
func disruptions(run *sysrun.Run, recs []report.StepRecord) []history.Disruption {
	out := run.Disruptions()
	for _, st := range recs {
		c := st.Call
		if slices.Contains([]string{"start", "stop", "kill", "fault"}, c.Def.Name) {
			continue // the services' own: sysrun's, when they struck
		}
		if iso := c.Isolation(); len(c.Faults()) > 0 || iso.Alone || iso.AloneOnBroker || iso.SplitDBs {
			out = append(out, history.Disruption{At: st.At, Until: st.At.Add(st.Duration), What: fmt.Sprintf("the step %s at %s", c, c.Pos)})
		}
	}
	slices.SortStableFunc(out, func(a, b history.Disruption) int { return a.At.Compare(b.At) })
	return out
}

// wireNotJudged marks what the run's broker wire cannot support: all the
// wire invariants without a protocol proxy, else what its proxy says.
func wireNotJudged(st *history.State, name string, wire *sysrun.Wire) {
	if k, ok := broker.Lookup(name); !ok || k.Proxy == nil {
		for _, inv := range wireInvariants {
			st.NotJudged[inv] = fmt.Sprintf("on %s there is no publish/ack history without a broker proxy: the services reach %s directly (the runner has no protocol proxy wired for it), so what they published, were handed and acknowledged is not seen", name, name)
		}
		return
	}
	for inv, why := range wire.NotJudged() {
		st.NotJudged[inv] = fmt.Sprintf("on %s: %s", name, why)
	}
}

// NotJudged marks every invariant not judged, for why.
func NotJudged(why string) map[string]string {
	out := map[string]string{}
	for _, inv := range history.InvariantNames() {
		out[inv] = why
	}
	return out
}

// brokerListing reads which entries the stream holds and which of them
// each group may still be handed: lost is judged on that, not on a guess
// of which entries a retention limit or a consumer's XDEL left.
func brokerListing(ctx context.Context, l broker.Lister, team *history.Team) error {
	entries, err := l.EntryList(ctx)
	if err != nil {
		return err
	}
	team.Held = map[string][]string{}
	for _, e := range entries {
		team.Held[e.EventID] = append(team.Held[e.EventID], e.ID)
	}
	team.Deliverable, err = l.Deliverable(ctx, entries)
	return err
}

// wireInvariants rest on what the services did on the broker, seen only
// through a protocol proxy.
var wireInvariants = []string{history.AckedWithoutEffect, history.DoublePublished, history.Lost, history.Stranded}

// entryEvents maps every entry id the history names to its event id.
func entryEvents(hist []history.Op) map[string]string {
	out := map[string]string{}
	for _, op := range hist {
		if op.EntryID != "" && op.EventID != "" {
			out[op.EntryID] = op.EventID
		}
	}
	return out
}

func judge(ctx context.Context, env *steps.Env, res *report.Result, hist []history.Op, consumers []string, models map[string][]string) error {
	return judgeWith(ctx, env, res, hist, consumers, models, nil)
}

// judgeWith reads the final state in one repeatable-read snapshot per
// database, lets amend add what the caller knows, and checks the history.
func judgeWith(ctx context.Context, env *steps.Env, res *report.Result, hist []history.Op, consumers []string, models map[string][]string, amend func(*history.State)) error {
	var st history.State
	err := snapshot(ctx, env, func(producer, consumer pgx.Tx) error {
		var err error
		st, err = history.LoadStateOf(ctx, producer, consumer, env.Broker, consumers, slices.Sorted(maps.Keys(models)), env.Mapping())
		return err
	})
	if err != nil {
		return fmt.Errorf("history check: %w", err)
	}
	if amend != nil {
		amend(&st)
	}
	sc := res.Scenario
	for _, inv := range sc.NotJudged { // over any other reason: the file said so
		st.NotJudged[inv] = fmt.Sprintf("by the scenario's own word (not_judged: at %s)", sc.NotJudgedPos)
	}
	if env.CDC != nil {
		// The CDC relay marks nothing: an event still waits for it only
		// while it is in the slot, committed after the confirmed LSN.
		pending, err := env.CDC.Pending(ctx)
		if err != nil {
			return fmt.Errorf("history check: %w", err)
		}
		st.Unpublished, st.CDC = map[string]bool{}, true
		for _, ev := range pending {
			st.Unpublished[ev.EventID] = true
		}
	}
	res.Violations = history.Check(hist, st, consumers, models)
	res.NotJudged, res.Inapplicable = st.NotJudged, st.Inapplicable
	occurred := map[string]bool{}
	for _, v := range res.Violations {
		occurred[v.Invariant] = true
		if !slices.Contains(sc.Violations(res.Broker), v.Invariant) {
			res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: "history",
				Msg: v.String() + "\n  (declare it with expect_violations: [" + v.Invariant + "] if this scenario shows an anti-pattern)"})
		}
	}
	for _, want := range sc.Violations(res.Broker) {
		if occurred[want] {
			continue
		}
		if why, no := unjudged(st.NotJudged, want); no || st.Inapplicable[want] != "" {
			if !no {
				why = st.Inapplicable[want]
			}
			res.Failures = append(res.Failures, steps.Failure{Pos: sc.ViolationsPos, Key: "expect_violations",
				Msg: fmt.Sprintf("declared %s, but it could not be judged here: %s", want, why)})
			continue
		}
		var got []string
		for inv := range occurred {
			got = append(got, inv)
		}
		slices.Sort(got)
		res.Failures = append(res.Failures, steps.Failure{Pos: sc.ViolationsPos, Key: "expect_violations",
			Msg: fmt.Sprintf("declared %s, but the history shows none (%s: %s); violations seen: [%s]", want, want, history.Invariants[want], strings.Join(got, ", "))})
	}
	return nil
}

// unjudged says why invariant inv, or a part of it ("stranded (entry 1-0
// of c)": an entry settling could not decide about), was not judged.
func unjudged(notJudged map[string]string, inv string) (string, bool) {
	if why, ok := notJudged[inv]; ok {
		return why, true
	}
	for _, k := range slices.Sorted(maps.Keys(notJudged)) {
		if strings.HasPrefix(k, inv+" (") {
			return strings.TrimPrefix(k, inv+" ") + ": " + notJudged[k], true
		}
	}
	return "", false
}

// snapshot runs read in one read-only repeatable-read transaction on each
// database: every query of a side sees the same instant, so an inbox and a
// read model are never read on either side of a consumer's commit.
func snapshot(ctx context.Context, env *steps.Env, read func(producer, consumer pgx.Tx) error) error {
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	ptx, err := env.Producer.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer ptx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only: nothing to keep
	ctx2, err := env.Consumer.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer ctx2.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only: nothing to keep
	return read(ptx, ctx2)
}
