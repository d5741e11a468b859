package explore

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/report"
)

// Outcome is what one point's run came to.
type Outcome string

const (
	Held       Outcome = "held"
	Violated   Outcome = "violation"
	Unclassed  Outcome = "unclassifiable"
	NotReached Outcome = "never reached"
	NotJudged  Outcome = "not judged"
	NotRun     Outcome = "not explored"
)

// Verdict is a point's outcome with its evidence.
type Verdict struct {
	Outcome Outcome
	// Broken are the invariants the history checker named, and "check
	// KEY" for each of the workload's own checks that failed.
	Broken []string
	Why    string // the first violation or failure; the reason of any other outcome
	// Unjudged are the invariants the evidence could not decide in a held
	// run, each with why: never reported as held.
	Unjudged map[string]string
	Took     time.Duration
}

// unclassifiable is how a fault's skip says the proxy could not strike it
// exactly (fault.Unclassifiable).
const unclassifiable = "cannot classify the boundary exactly"

// classify reads a point's result: violated when the history checker
// named an invariant or a check failed; else never reached when its fault
// never fired (the nth crossing did not come in this run); not judged when
// the system did not settle or the scenario was skipped; held otherwise.
func classify(res *report.Result) Verdict {
	if res == nil {
		return Verdict{Outcome: NotRun, Why: "the run stopped before it"}
	}
	v := Verdict{Took: res.Duration}
	if res.Skipped != "" {
		v.Outcome, v.Why = NotJudged, res.Skipped
		if strings.Contains(res.Skipped, unclassifiable) {
			v.Outcome = Unclassed
		}
		return v
	}
	settle, reach, other := v.failures(res)
	switch {
	case len(v.Broken) > 0:
		v.Outcome = Violated
	case settle != "":
		v.Outcome, v.Why = NotJudged, firstLine(settle)
	case reach != "":
		v.Outcome, v.Why = NotReached, firstLine(reach)
	case other != "":
		v.Outcome, v.Why = NotJudged, firstLine(other)
	default:
		v.Outcome = Held
		v.Unjudged = maps.Clone(res.NotJudged)
		delete(v.Unjudged, history.Unbalanced) // a team's books are never mapped: said once, in the summary (unbalancedNote)
	}
	return v
}

// failures sorts a result's failures: the broken invariants and checks
// into v; what kept the run from a verdict (settle, a fault never reached,
// a step that could not run) returned.
func (v *Verdict) failures(res *report.Result) (settle, reach, other string) {
	for _, f := range res.Failures {
		switch {
		case f.Key == "history":
		case f.Key == "settle":
			settle = f.Msg
		case f.Key == "error": // a step that could not run (a timeout, a start that failed): no check said anything
			other = fmt.Sprintf("%s: %s", f.Pos, f.Msg)
		case f.Key == "fault" && strings.Contains(f.Msg, "never fired"):
			reach = f.Msg
		case f.Key == "fault":
			other = f.Msg
		default:
			v.Broken = append(v.Broken, "check "+f.Key)
			if v.Why == "" {
				v.Why = fmt.Sprintf("%s: %s", f.Pos, firstLine(f.Msg))
			}
		}
	}
	for _, viol := range res.Violations {
		if !slices.Contains(v.Broken, viol.Invariant) {
			v.Broken = append(v.Broken, viol.Invariant)
		}
		if v.Why == "" || strings.HasPrefix(v.Why, "check ") {
			v.Why = firstLine(viol.String())
		}
	}
	slices.Sort(v.Broken)
	return settle, reach, other
}

// same reports whether a run broke one of the invariants a finding broke:
// what shrinking and confirmation keep. Of a finding the history checker
// named, only its invariants count: a workload check that fails because
// shrinking left events out (inbox.rows: 2 with one event) is not the bug.
func (v Verdict) same(broken []string) bool {
	want := broken
	if inv := invariants(broken); len(inv) > 0 {
		want = inv
	}
	return v.Outcome == Violated && slices.ContainsFunc(v.Broken, func(b string) bool { return slices.Contains(want, b) })
}

// invariants are the history invariants of broken, without its failed
// checks ("check KEY").
func invariants(broken []string) []string {
	return slices.DeleteFunc(slices.Clone(broken), func(b string) bool { return strings.HasPrefix(b, "check ") })
}

func (v Verdict) String() string {
	switch v.Outcome {
	case Violated:
		return "VIOLATION " + strings.Join(v.Broken, ", ") + ": " + v.Why
	case Held:
		if len(v.Unjudged) > 0 {
			return "held (not judged: " + strings.Join(slices.Sorted(maps.Keys(v.Unjudged)), ", ") + ")"
		}
		return "held"
	}
	return string(v.Outcome) + ": " + v.Why
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// pipelineCaveat is why double_published is not judged after an error at
// an operation op a client pipelines (a Kind's Pipelined: XADD on Redis):
// the proxy answers the failed one with an error, yet those a relay
// pipelined after it were sent before it could see that error, and their
// publishing again is its retry (at least once), which the proxy cannot
// tell from a double publish.
func pipelineCaveat(op string) string {
	return fmt.Sprintf("not judged after an error at an %s: the %ss a relay pipelined after the failed one were sent before it could see the error, and publishing them again is its retry (at least once), which the proxy cannot tell from a double publish", op, op)
}

// pipelined is the operation a client pipelines (a Kind's Pipelined) that
// the schedule errors, so that pipelineCaveat applies; "" when it errors
// none. The trigger names the operation: XADD is Redis's wherever the
// schedule runs.
func pipelined(faults []Fault) string {
	for _, k := range broker.Kinds() {
		if k.Pipelined != "" && slices.ContainsFunc(faults, func(f Fault) bool {
			return f.Do == "error" && f.On.Link == fault.Broker && f.On.Filter.Command == k.Pipelined
		}) {
			return k.Pipelined
		}
	}
	return ""
}

// afterPipelinedError takes double_published out of a verdict of a
// schedule with an error at an operation a client pipelines
// (pipelineCaveat).
func (v Verdict) afterPipelinedError(faults []Fault) Verdict {
	op := pipelined(faults)
	if op == "" || !slices.Contains(v.Broken, history.DoublePublished) {
		return v
	}
	v.Broken = slices.DeleteFunc(slices.Clone(v.Broken), func(b string) bool { return b == history.DoublePublished })
	if v.Unjudged == nil {
		v.Unjudged = map[string]string{}
	}
	v.Unjudged[history.DoublePublished] = pipelineCaveat(op)
	if len(v.Broken) == 0 {
		v.Outcome, v.Why = Held, ""
	}
	return v
}
