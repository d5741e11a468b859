// Package report holds what a run found — one Result per scenario and
// broker, the Report of a run — and every way of showing it: the console
// blocks (printed above the run's progress line, internal/progress), JUnit
// XML, JSON, Markdown with sequence diagrams, and the broker guarantees
// document.
package report

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// Result is what happened to one scenario.
type Result struct {
	Scenario *scenario.Scenario
	Broker   string // the broker it ran on
	Label    string // the broker's server where it is not the broker itself: "kafka (kfake)"; "" otherwise
	Caps     broker.Capabilities
	// Matrix: the run had several brokers (or not the default one), so the
	// broker is part of the result's name.
	Matrix   bool
	Failures []steps.Failure // empty: passed
	Steps    []StepRecord    // the steps that ran, the failing one last
	Alerts   []string        // shown even for a passing scenario: identity conflicts
	// Services are what a team's services said (secrets hidden): every
	// process a start step started, the killed ones too, in start order;
	// shown with a failure's trace, and with -v for a passing scenario.
	Services []ServiceOutput
	// Violations are what the history checker found, declared or not.
	Violations []history.Violation
	// NotJudged are the invariants the evidence could not decide, each with
	// why (a team's system on a broker without a protocol proxy, a system
	// that never settled): never shown as "no violation". Nil when the
	// history was not checked.
	NotJudged map[string]string
	// Inapplicable are the invariants this kind of run can never judge,
	// each with why (history.State's): shown under -v, not as a gap.
	Inapplicable map[string]string
	// Settled says how a team's system settled before it was judged
	// ("settled in 420ms"); "" for the reference pipeline.
	Settled string
	// SettleStart and SettleEnd bound the settle window of a team's
	// system (zero when it did not settle): drawn on the timeline.
	SettleStart, SettleEnd time.Time
	// Wire is what the team's processes did on the wire, for the
	// timeline; nil on the reference pipeline.
	Wire    *Wire
	Kept    []string // with --keep: commands to inspect what was left in place
	Skipped string   // why the scenario could not run to its end here (not a pass)
	// CutOff: the run was interrupted (SIGINT, SIGTERM) before the
	// scenario's verdict: a first failing step, or the end of judging.
	CutOff bool
	// NA are the state checks this broker could not read: reported, not
	// judged; the rest of the scenario ran.
	NA    []steps.NA
	Where [3]string // producer and consumer database, stream key
	// Run is which of Runs runs of the scenario on this broker this is
	// (run --repeat N), from 1; 0 and 0 when it ran once.
	Run, Runs int
	Setup     time.Duration // isolation: creating databases and the stream
	Duration  time.Duration // all of it, setup and cleanup included
}

// ServiceOutput is what one process of a team's service wrote, with the
// start step that started it and how it ended.
type ServiceOutput struct {
	Service string
	Start   string // the start step's position, file:line:col
	Fault   string // the fault armed with that start, "" for none
	PID     int
	Ended   string // "killed by the fault", "still running when the scenario ended", …
	Output  string // its latest output
}

// Label names the process: "service consumer (started at f.yaml:6:5, fault
// consumer_db.commit(table=inbox) do=kill, killed by the fault; pid 42)".
func (o ServiceOutput) Label() string {
	parts := []string{"started at " + o.Start}
	if o.Fault != "" {
		parts = append(parts, "fault "+o.Fault)
	}
	parts = append(parts, o.Ended)
	return fmt.Sprintf("service %s (%s; pid %d)", o.Service, strings.Join(parts, ", "), o.PID)
}

// serviceLines are what the services said, as the console and JUnit show
// it: each process's label, then its output, indented.
func serviceLines(svcs []ServiceOutput) []string {
	var lines []string
	for _, o := range svcs {
		lines = append(lines, safe.LongLine(o.Label())+" output:")
		text := strings.TrimRight(o.Output, "\n")
		if text == "" {
			lines = append(lines, "    (nothing)")
			continue
		}
		for _, line := range strings.Split(text, "\n") {
			lines = append(lines, "    | "+safe.LongLine(line))
		}
	}
	return lines
}

// Name is the scenario's name, with " [broker]" in a broker matrix.
func (r *Result) Name() string {
	name := r.Scenario.Name
	if r.Matrix {
		name += " [" + cmp.Or(r.Label, r.Broker) + "]"
	}
	if r.Runs > 0 {
		name += fmt.Sprintf(" (run %d/%d)", r.Run, r.Runs)
	}
	return name
}

// Repeated is the runs of one scenario on one broker under run --repeat:
// how many ended each way.
type Repeated struct {
	Scenario                 *scenario.Scenario
	Name                     string // the scenario's, with its broker in a matrix
	File                     string
	Broker                   string
	Runs                     int
	Passed, Failed, Skipped  int
	FirstFailed, FirstPassed int // the run index of the first of each, 0 for none
}

// Flaky: its runs did not all end the same way.
func (f Repeated) Flaky() bool {
	n := 0
	for _, c := range []int{f.Passed, f.Failed, f.Skipped} {
		if c > 0 {
			n++
		}
	}
	return n > 1
}

// String is "2/3 passed" with the other verdicts counted after.
func (f Repeated) String() string {
	s := fmt.Sprintf("%d/%d passed", f.Passed, f.Runs)
	if f.Failed > 0 {
		s += fmt.Sprintf(", %d failed (first: run %d)", f.Failed, f.FirstFailed)
	}
	if f.Skipped > 0 {
		s += fmt.Sprintf(", %d skipped", f.Skipped)
	}
	return s
}

// Repeats groups the results of a run --repeat by scenario and broker, in
// the order each first appears; nil for a run without --repeat.
func (r *Report) Repeats() []Repeated {
	var out []Repeated
	at := map[*scenario.Scenario]map[string]int{}
	for _, res := range r.Results {
		if res.Runs == 0 {
			continue
		}
		if at[res.Scenario] == nil {
			at[res.Scenario] = map[string]int{}
		}
		i, ok := at[res.Scenario][res.Broker]
		if !ok {
			i = len(out)
			at[res.Scenario][res.Broker] = i
			name := res.Scenario.Name
			if res.Matrix {
				name += " [" + cmp.Or(res.Label, res.Broker) + "]"
			}
			out = append(out, Repeated{Scenario: res.Scenario, Name: name, File: res.Scenario.File, Broker: res.Broker})
		}
		f := &out[i]
		f.Runs++
		switch res.Status() {
		case "failed":
			f.Failed++
			f.FirstFailed = cmp.Or(f.FirstFailed, res.Run)
		case "skipped":
			f.Skipped++
		default:
			f.Passed++
			f.FirstPassed = cmp.Or(f.FirstPassed, res.Run)
		}
	}
	return out
}

// Judged are the invariants the history checker decided, sorted: all but
// those not judged; none when the history was not checked at all
// (NotJudged is nil then).
func (r *Result) Judged() []string {
	if r.NotJudged == nil {
		return nil
	}
	partly := r.JudgedInPart()
	return slices.DeleteFunc(history.InvariantNames(), func(inv string) bool {
		_, no := r.NotJudged[inv]
		_, never := r.Inapplicable[inv]
		return no || never || partly[inv] > 0
	})
}

// JudgedInPart are the invariants judged for all but some of what they
// cover (a pending entry settling could not decide about: NotJudged's key
// "stranded (entry 1-0 of accounting)"), each with how many parts were
// not judged. Such an invariant is neither "no violation" nor "not
// judged": its exceptions are listed with why.
func (r *Result) JudgedInPart() map[string]int {
	out := map[string]int{}
	for k := range r.NotJudged {
		if inv, _, ok := strings.Cut(k, " ("); ok {
			if _, whole := r.NotJudged[inv]; !whole {
				out[inv]++
			}
		}
	}
	return out
}

// NotJudgedLines are the invariants not judged, grouped by why: one line
// "acked_without_effect, lost: not judged on kafka: …" per reason, in the
// order of their first invariant. A reason is the runner's own sentence
// around user values: it is escaped where it is printed.
func (r *Result) NotJudgedLines() []string {
	byWhy := map[string][]string{}
	var order []string
	for _, inv := range slices.Sorted(maps.Keys(r.NotJudged)) {
		why := r.NotJudged[inv]
		if byWhy[why] == nil {
			order = append(order, why)
		}
		byWhy[why] = append(byWhy[why], inv)
	}
	lines := make([]string, len(order))
	for i, why := range order {
		lines[i] = strings.Join(byWhy[why], ", ") + ": " + why
	}
	return lines
}

// Passed reports whether the scenario did everything it said.
func (r *Result) Passed() bool { return len(r.Failures) == 0 }

// Report is the outcome of a run.
type Report struct {
	// Version is the runner's build (internal/version), for a report read
	// far from the run.
	Version string
	RunID   string               // names every database and stream key of the run
	Brokers []string             // the brokers of the run, in --broker order
	Labels  map[string]string    // broker → how reports name its server, where not the broker itself ("kafka (kfake)")
	NotRun  []*scenario.Scenario // not started: --fail-fast, Ctrl-C or a setup error
	// Interrupted: SIGINT or SIGTERM cut the run short (the scenarios it
	// cut off are skipped, not judged).
	Interrupted bool
	Results     []*Result
	Duration    time.Duration
}

// Label is how reports name broker b's server: "kafka (kfake)" for the
// runner's own Kafka-protocol server, else the broker's name.
func (r *Report) Label(b string) string { return cmp.Or(r.Labels[b], b) }

// Failed counts failed scenarios.
func (r *Report) Failed() int {
	n := 0
	for _, res := range r.Results {
		if !res.Passed() {
			n++
		}
	}
	return n
}

// StepRecord is one executed step: the call as loaded and what it did.
type StepRecord struct {
	Call     *steps.Call
	Result   steps.Result
	Failures []steps.Failure
	At       time.Time // when it began: its place on the timeline
	Duration time.Duration
}

// traceLines is the step as the console shows it: position, shorthand,
// outcome, then indented details.
func (st StepRecord) traceLines() []string {
	line := fmt.Sprintf("%s: %s", st.Call.Pos, st.Call)
	if st.Call.Label != "" {
		line += " # " + st.Call.Label
	}
	if len(st.Result.Outcome) > 0 {
		line += " → " + formatOutcome(st.Call.Def, st.Result.Outcome)
	}
	lines := []string{safe.LongLine(line)}
	for _, d := range st.Result.Details {
		lines = append(lines, "    "+safe.LongLine(d))
	}
	return lines
}

func formatOutcome(d *steps.Def, o map[string]int64) string {
	var parts []string
	for _, k := range d.Outcomes {
		parts = append(parts, fmt.Sprintf("%s=%d", k.Name, o[k.Name]))
	}
	return strings.Join(parts, " ")
}

// FormatResult renders one scenario's result as one block of text, so that
// results never interleave.
func FormatResult(r *Result, verbose bool) []byte {
	var b bytes.Buffer
	status := "PASS"
	switch {
	case !r.Passed():
		status = "FAIL"
	case r.Skipped != "":
		status = "SKIP"
	}
	fmt.Fprintf(&b, "--- %s: %s (%s, %s)\n", status, safe.Line(r.Name()), safe.Line(r.Scenario.File), r.Duration.Round(time.Millisecond))
	if verbose || !r.Passed() {
		for _, st := range r.Steps {
			for _, t := range st.traceLines() {
				fmt.Fprintf(&b, "    %s\n", t)
			}
		}
		for _, line := range serviceLines(r.Services) {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	} else {
		for _, a := range r.Alerts {
			fmt.Fprintf(&b, "    reported %s\n", safe.LongLine(a))
		}
	}
	if verbose {
		for _, v := range r.Violations {
			if slices.Contains(r.Scenario.Violations(r.Broker), v.Invariant) {
				fmt.Fprintf(&b, "    history (declared): %s\n", violationText(v, "\n        "))
			}
		}
		if r.Settled != "" {
			fmt.Fprintf(&b, "    system: %s\n", safe.LongLine(r.Settled))
		}
		if r.Passed() && r.Skipped == "" && len(r.Violations) == 0 {
			fmt.Fprintf(&b, "    history: no violation (%s)\n", strings.Join(r.Judged(), ", "))
		}
		partly := r.JudgedInPart()
		for _, inv := range slices.Sorted(maps.Keys(partly)) {
			fmt.Fprintf(&b, "    history: %s judged but for %d part(s), each not judged below\n", inv, partly[inv])
		}
		for _, inv := range slices.Sorted(maps.Keys(r.NotJudged)) {
			fmt.Fprintf(&b, "    history: not judged: %s: %s\n", inv, safe.LongLine(r.NotJudged[inv]))
		}
		for _, inv := range slices.Sorted(maps.Keys(r.Inapplicable)) {
			fmt.Fprintf(&b, "    history: never judged on this kind of run: %s: %s\n", inv, safe.LongLine(r.Inapplicable[inv]))
		}
	}
	if r.Skipped != "" {
		fmt.Fprintf(&b, "    skipped at %s\n", safe.LongLine(r.Skipped))
	} else if !verbose {
		for _, n := range r.NA {
			fmt.Fprintf(&b, "    n/a %s\n", safe.LongLine(n.String()))
		}
		// What the verdict did not cover shows even on a pass: a PASS
		// never stands for an invariant nobody could judge.
		for _, line := range r.NotJudgedLines() {
			fmt.Fprintf(&b, "    history: not judged: %s\n", safe.LongLine(line))
		}
	}
	for _, k := range r.Kept {
		fmt.Fprintf(&b, "    kept %s\n", safe.LongLine(k))
	}
	for _, f := range r.Failures {
		if !strings.Contains(f.Msg, "\n") {
			fmt.Fprintf(&b, "    FAIL %s\n", safe.LongLine(f.String()))
			continue
		}
		fmt.Fprintf(&b, "    FAIL %s: %s:\n", safe.Line(f.Pos.String()), safe.Line(f.Key))
		for _, line := range strings.Split(f.Msg, "\n") {
			fmt.Fprintf(&b, "        %s\n", safe.LongLine(line))
		}
	}
	return b.Bytes()
}

// violationText is v for a terminal or Markdown: its first line, then each
// witness op on a line of its own after sep, every user value escaped.
func violationText(v history.Violation, sep string) string {
	ops := v.Witness
	v.Witness = nil
	var b strings.Builder
	b.WriteString(safe.LongLine(v.String()))
	for _, op := range ops {
		b.WriteString(sep + safe.LongLine(op.String()))
	}
	return b.String()
}

// Summary is the last line of a run.
func (r *Report) Summary() string {
	failed := r.Failed()
	word := "ok"
	switch {
	case failed > 0:
		word = "FAIL"
	case len(r.NotRun) > 0 || r.Interrupted:
		word = "INCOMPLETE" // interrupted or stopped by a setup error: not ok
	}
	extra := ""
	if n := r.Skipped(); n > 0 {
		extra += fmt.Sprintf(", %d skipped", n)
	}
	if len(r.NotRun) > 0 {
		extra += fmt.Sprintf(", %d not run", len(r.NotRun))
	}
	if n := r.NA(); n > 0 {
		extra += fmt.Sprintf(" (n/a checks: %d)", n)
	}
	return r.repeatLines() + fmt.Sprintf("%s: %d passed, %d failed%s, %d scenarios in %s",
		word, len(r.Results)-failed-r.Skipped(), failed, extra, len(r.Results)+len(r.NotRun), r.Duration.Round(time.Millisecond))
}

// repeatLines are the summary's lines of a run --repeat: each scenario
// whose runs did not all end the same way (flaky), with its counts, then
// how many were stable; "" without --repeat.
func (r *Report) repeatLines() string {
	reps := r.Repeats()
	if len(reps) == 0 {
		return ""
	}
	var b strings.Builder
	stable := map[string]int{}
	for _, f := range reps {
		if f.Flaky() {
			fmt.Fprintf(&b, "flaky: %s (%s): %s\n", safe.Line(f.Name), safe.Line(f.File), f)
			continue
		}
		switch {
		case f.Failed > 0:
			stable["failed"]++
			fmt.Fprintf(&b, "failed every run: %s (%s): %s\n", safe.Line(f.Name), safe.Line(f.File), f)
		case f.Skipped > 0:
			stable["skipped"]++
		default:
			stable["passed"]++
		}
	}
	fmt.Fprintf(&b, "repeat: %d scenario(s) × %d runs: %d flaky, %d passed every run, %d failed every run, %d skipped every run\n",
		len(reps), reps[0].Runs, len(reps)-stable["failed"]-stable["skipped"]-stable["passed"], stable["passed"], stable["failed"], stable["skipped"])
	return b.String()
}

// NA counts the state checks that were n/a, over the scenarios that ran
// (a skipped scenario's are not counted: it judged nothing).
func (r *Report) NA() int {
	n := 0
	for _, res := range r.Results {
		if res.Skipped == "" {
			n += len(res.NA)
		}
	}
	return n
}

// Skipped counts scenarios that could not run here (not failed, not passed).
func (r *Report) Skipped() int {
	n := 0
	for _, res := range r.Results {
		if res.Skipped != "" && res.Passed() {
			n++
		}
	}
	return n
}
