package soak

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/report"
)

// Report is what a soak run measured and judged.
type Report struct {
	Params Params
	RunID  string // names the run's databases and streams (drill_RUNID_…)
	Steps  int    // the schedules' steps
	// Duration is from the first step to the last schedule's verdict.
	Duration time.Duration
	// Faults are the faults that met work, by the step and parameter that
	// inject them (produce(fail=divzero), relay(skip_mark), …).
	Faults map[string]int64
	// Outcomes are the deliveries by outcome (applied, duplicate, failed,
	// conflict, deferred), as the consume and claim steps counted them.
	Outcomes   map[string]int64
	RelayFirst time.Duration // median relay step, first tenth of each schedule
	RelayLast  time.Duration // and last tenth
	History    Totals
	// Violations are what the history checker found in the schedules.
	Violations []history.Violation
	// Judged are the invariants the checker judged; NotJudged, any it
	// could not, with why.
	Judged    []string
	NotJudged map[string]string
	RawPerSec float64 // the raw baseline's events/s, when measured
	// Findings are the violations' schedules, shrunk and written (Out).
	Findings []Finding
}

// Totals are what the schedules' steps did, in the end.
type Totals struct {
	Committed     int   // events committed
	StreamEntries int   // entries published (duplicates included)
	Applied       int   // events applied: new in the inbox
	Pending       int64 // entries delivered and never acked
}

// EventsPerSec is the soak's throughput, faults and recovery included.
func (r *Report) EventsPerSec() float64 { return float64(r.Params.Events) / r.Duration.Seconds() }

// Work is what the soak had the servers do for its events, in units of
// what the raw baseline does for as many: its producer transactions (one
// a fault rolled back too), stream entries and deliveries, each one per
// event there. 1 without faults; a fault's recovery is work the baseline
// never does (a rolled-back produce done again, a batch published again
// because it was not marked, a pass that failed or did not ack delivered
// again), and this says how much of it there was.
func (r *Report) Work() float64 {
	var delivered int64
	for _, n := range r.Outcomes {
		delivered += n
	}
	produced := int64(r.History.Committed) + r.Faults[produceFail]
	return float64(produced+int64(r.History.StreamEntries)+delivered) / float64(3*r.Params.Events)
}

// deliveryOutcomes are the outcome keys of consume and claim that count a
// delivery each.
var deliveryOutcomes = []string{"applied", "duplicate", "failed", "conflict", "deferred"}

// summarize sums up the schedules' results; a schedule that did not come
// to a verdict (a step that failed, a skip) is an error: the drill itself
// broke, and a history it did not finish is not judged.
func (r *Report) summarize(scheds []schedule, results []*report.Result) error {
	r.Faults, r.Outcomes, r.NotJudged = map[string]int64{}, map[string]int64{}, map[string]string{}
	var firsts, lasts []time.Duration
	acked := map[string]bool{} // by entry: its last delivery acked it
	for k, res := range results {
		if err := verdictless(res); err != nil {
			return err
		}
		r.Steps += len(scheds[k].steps)
		var relays []time.Duration
		for i, rec := range res.Steps {
			if rec.Call.Def.Name == "relay" && rec.Result.Outcome["published"] > 0 { // as the old trend: batches, not empty passes
				relays = append(relays, rec.Duration)
			}
			r.count(scheds[k].steps[i], rec, acked)
		}
		if n := max(1, len(relays)/10); len(relays) > 0 {
			firsts, lasts = append(firsts, relays[:n]...), append(lasts, relays[len(relays)-n:]...)
		}
		r.Violations = append(r.Violations, res.Violations...)
		maps.Copy(r.NotJudged, res.NotJudged)
		r.Judged = judged(res)
	}
	for _, ok := range acked {
		if !ok {
			r.History.Pending++
		}
	}
	r.RelayFirst, r.RelayLast = median(firsts), median(lasts)
	return nil
}

// count adds one step's outcomes, and its fault when it met work.
func (r *Report) count(st step, rec report.StepRecord, acked map[string]bool) {
	out := rec.Result.Outcome
	switch st.name {
	case "produce":
		r.History.Committed += int(out["committed"])
	case "relay", "publish":
		r.History.StreamEntries += int(out["published"])
	case "consume", "claim":
		for _, k := range deliveryOutcomes {
			r.Outcomes[k] += out[k]
		}
		r.History.Applied += int(out["applied"])
		for _, e := range rec.Result.Entries {
			acked[e.EntryID] = e.Acked || e.DeadLettered
		}
	}
	if st.fault != "" && struck(st.fault, out) {
		r.Faults[st.fault]++
	}
}

// struck: the step's fault met work (a pass that found nothing to relay or
// read struck nothing).
func struck(fault string, out map[string]int64) bool {
	switch fault {
	case skipMark, replay:
		return out["published"] > 0
	case consumeAck, claimAck:
		return out["delivered"] > 0
	case producerCrash, brokerCrash, consumerCrash:
		return true // a step that ran did restart its server
	}
	return out["failed"] > 0
}

// verdictless says why a schedule has no verdict, if it has none.
func verdictless(res *report.Result) error {
	switch {
	case res == nil:
		return fmt.Errorf("a schedule did not run")
	case res.Skipped != "":
		return fmt.Errorf("the schedule was skipped: %s", res.Skipped)
	case res.CutOff:
		return fmt.Errorf("%s: interrupted before its verdict", res.Scenario.Pos)
	}
	for _, f := range res.Failures {
		if f.Key != "history" {
			return fmt.Errorf("%s: %s: %s (the schedule stopped before its verdict: the drill itself broke)", f.Pos, f.Key, f.Msg)
		}
	}
	return nil
}

// judged are the invariants res's history was judged on.
func judged(res *report.Result) []string {
	return slices.DeleteFunc(history.InvariantNames(), func(inv string) bool {
		_, no := res.NotJudged[inv]
		_, never := res.Inapplicable[inv]
		return no || never
	})
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	c := slices.Clone(ds)
	slices.Sort(c)
	return c[len(c)/2]
}

// Format renders the report for the console.
func (r *Report) Format() string {
	var b strings.Builder
	p := r.Params
	fmt.Fprintf(&b, "soak: %d events, faults %.2f, seed %d, parallel %d\n", p.Events, p.Faults, p.Seed, p.Workers)
	fmt.Fprintf(&b, "  schedule     %d steps of the scenario language in %d scenario(s), run by the runner on the reference pipeline\n", r.Steps, p.Workers)
	fmt.Fprintf(&b, "  throughput   %.0f events/s (%s)\n", r.EventsPerSec(), r.Duration.Round(time.Millisecond))
	if r.RawPerSec > 0 {
		fmt.Fprintf(&b, "  raw baseline %.0f events/s on the same servers: pipeline/raw %.0f%%\n", r.RawPerSec, 100*r.EventsPerSec()/r.RawPerSec)
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	fmt.Fprintf(&b, "  faults       %s\n", orNone(strings.Join(kinds, ", ")))
	fmt.Fprintf(&b, "  deliveries   applied %d, duplicate %d, failed %d, conflict %d\n",
		r.Outcomes["applied"], r.Outcomes["duplicate"], r.Outcomes["failed"], r.Outcomes["conflict"])
	fmt.Fprintf(&b, "  history      %d committed, %d stream entries, %d in the inbox, %d pending\n",
		r.History.Committed, r.History.StreamEntries, r.History.Applied, r.History.Pending)
	fmt.Fprintf(&b, "  relay batch  median %s in the first tenth, %s in the last\n", r.RelayFirst.Round(10*time.Microsecond), r.RelayLast.Round(10*time.Microsecond))
	for _, inv := range slices.Sorted(maps.Keys(r.NotJudged)) {
		fmt.Fprintf(&b, "  not judged   %s: %s\n", inv, r.NotJudged[inv])
	}
	if len(r.Violations) == 0 {
		fmt.Fprintf(&b, "  verdict      OK: none of %s\n", strings.Join(r.Judged, ", "))
		return b.String() + r.FormatFindings()
	}
	fmt.Fprintf(&b, "  verdict      %d VIOLATION(S)\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "    ... and %d more\n", len(r.Violations)-20)
			break
		}
		fmt.Fprintf(&b, "    %s\n", safe.Text(v.String())) // event ids a --with may have named
	}
	fmt.Fprintf(&b, "  replay with  %s\n", safe.LongLine(p.command()))
	return b.String() + r.FormatFindings()
}

// command is the command line that writes and runs the same schedules.
func (p Params) command() string {
	c := fmt.Sprintf("runner soak --in-process --events %d --faults %g --seed %d --parallel %d --batch %d", p.Events, p.Faults, p.Seed, p.Workers, p.Batch)
	for _, w := range p.With {
		c += " --with " + shellWord(w)
	}
	return c
}

// shellWord quotes w for a POSIX shell when it needs it.
func shellWord(w string) string {
	if plain().MatchString(w) {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
