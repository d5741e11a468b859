package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

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
				Consumer: e.Consumer, Model: cons.Model, Payload: e.Payload, Acked: e.Acked, DLQ: e.DeadLettered, Republish: e.Republish})
		}
	}
	return out
}

// judgeHistory checks a scenario that ran to its end as a whole. A violation
// fails it unless declared in expect_violations; a declared one that did not
// occur fails it too, so an anti-pattern scenario must show its damage.
func judgeHistory(ctx context.Context, env *steps.Env, res *report.Result) error {
	return judge(ctx, env, res, ops(res.Steps), res.Scenario.Consumers(), res.Scenario.ReadModels())
}

// judgeSystem judges a team's system: the producer's commits as the
// produce steps made them, the publishes, deliveries and acks as the
// services' broker proxies saw them, and the state read through the
// system file's mappings. Each consumer id is its own read model.
func judgeSystem(ctx context.Context, env *steps.Env, run *sysrun.Run, res *report.Result) error {
	hist := append(ops(res.Steps), run.Ops()...)
	consumers := run.Consumers()
	if c := defaultConsumerOf(res.Scenario); !slices.Contains(consumers, c) {
		consumers = append(consumers, c)
		slices.Sort(consumers)
	}
	models := map[string][]string{}
	for _, c := range consumers {
		models[c] = []string{c}
	}
	return judge(ctx, env, res, hist, consumers, models)
}

func judge(ctx context.Context, env *steps.Env, res *report.Result, hist []history.Op, consumers []string, models map[string][]string) error {
	st, err := history.LoadStateOf(ctx, env.Producer, env.Consumer, env.Broker, consumers, slices.Sorted(maps.Keys(models)), env.Mapping())
	if err != nil {
		return fmt.Errorf("history check: %w", err)
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
	sc := res.Scenario
	occurred := map[string]bool{}
	for _, v := range res.Violations {
		occurred[v.Invariant] = true
		if !slices.Contains(sc.Violations(res.Broker), v.Invariant) {
			res.Failures = append(res.Failures, steps.Failure{Pos: sc.Pos, Key: "history",
				Msg: v.String() + "\n  (declare it with expect_violations: [" + v.Invariant + "] if this scenario shows an anti-pattern)"})
		}
	}
	for _, want := range sc.Violations(res.Broker) {
		if !occurred[want] {
			var got []string
			for inv := range occurred {
				got = append(got, inv)
			}
			slices.Sort(got)
			res.Failures = append(res.Failures, steps.Failure{Pos: sc.ViolationsPos, Key: "expect_violations",
				Msg: fmt.Sprintf("declared %s, but the history shows none (%s: %s); violations seen: [%s]", want, want, history.Invariants[want], strings.Join(got, ", "))})
		}
	}
	return nil
}
