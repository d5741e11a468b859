package explore

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/safe"
)

// Counts are the points by outcome (pruned ones apart).
func (r *Result) Counts() map[Outcome]int {
	out := map[Outcome]int{}
	for _, p := range r.Points {
		if p.Pruned == "" {
			out[p.Outcome]++
		}
	}
	return out
}

// Run is how many points ran (a verdict of their own, whatever it is).
func (r *Result) Run() int {
	n := 0
	for _, p := range r.runPoints() {
		if !p.Listed && p.Outcome != NotRun {
			n++
		}
	}
	return n
}

func (r *Result) runPoints() []*Point {
	var out []*Point
	for _, p := range r.Points {
		if p.Pruned == "" {
			out = append(out, p)
		}
	}
	return out
}

// Summary writes the console's closing report.
func (r *Result) Summary(w io.Writer) {
	if r.Observed.Outcome != Held {
		fmt.Fprintf(w, "the workload does not hold without any fault (%s): nothing was explored\n", safe.Line(r.Observed.String()))
		r.findingLines(w)
		return
	}
	if r.Random != nil {
		r.Random.summary(w)
	} else {
		c := r.Counts()
		n := r.Run()
		rate := ""
		if n > 0 && r.Explore > 0 {
			rate = fmt.Sprintf(" (%.2f points/s, %s per point on %d at once)", float64(n)/r.Explore.Seconds(), (r.Explore * time.Duration(r.Parallel) / time.Duration(n)).Round(10*time.Millisecond), r.Parallel)
		}
		if r.Pace != "" {
			fmt.Fprintf(w, "parallel: %s\n", r.Pace)
		}
		fmt.Fprintf(w, "explored %d point(s) in %s%s: %d held, %d violation(s), %d unclassifiable, %d never reached, %d not judged, %d not explored; %d pruned\n",
			n, r.Explore.Round(10*time.Millisecond), rate, c[Held], c[Violated], c[Unclassed], c[NotReached], c[NotJudged], c[NotRun], len(r.Points)-len(r.runPoints()))
		r.listOutcome(w, Unclassed, "unclassifiable (the proxy could not strike it exactly; never guessed)")
		r.listOutcome(w, NotJudged, "not judged")
		r.listOutcome(w, NotRun, "not explored")
	}
	if len(r.Findings) == 0 {
		if n := r.unwritten(); n > 0 {
			// An interrupted run violated before it shrank: never "no violation".
			fmt.Fprintf(w, "%d point(s) violated an invariant, but the run ended before they were shrunk and written as scenarios: the JSON report lists them\n", n)
			return
		}
		fmt.Fprintf(w, "no violation at the points that ran; %s\n", unbalancedNote)
		return
	}
	r.findingLines(w)
}

// unwritten counts the runs that violated an invariant (the points, or the
// random schedule) when no finding was written of them.
func (r *Result) unwritten() int {
	if r.Random != nil {
		if r.Random.Verdict.Outcome == Violated {
			return 1
		}
		return 0
	}
	return r.Counts()[Violated]
}

// findingLines lists the findings with their written files.
func (r *Result) findingLines(w io.Writer) {
	if len(r.Findings) == 0 {
		return
	}
	fmt.Fprintf(w, "%d violation(s), each written as a minimal scenario:\n", len(r.Findings))
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %s: %s\n", strings.Join(f.Broken, ", "), safe.Line(faultList(r.Workload, f.Minimal.Faults)))
		fmt.Fprintf(w, "    %s\n", safe.Line(f.Why))
		if len(f.Also) > 0 {
			fmt.Fprintf(w, "    also at: %s\n", alsoAt(f.Also))
		}
		verb := "wrote"
		if strings.HasSuffix(f.File, unconfirmedExt) {
			verb = "kept aside"
		}
		fmt.Fprintf(w, "    shrunk: %s; %s\n    %s %s (runner run %s)\n", f.Shrunk, f.Reproduces(), verb, safe.Line(f.File), safe.Line(f.File))
	}
}

// listOutcome lists the run points of one outcome, at most 20.
func (r *Result) listOutcome(w io.Writer, o Outcome, title string) {
	var ps []*Point
	for _, p := range r.runPoints() {
		if p.Outcome == o {
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for i, p := range ps {
		if i == 20 {
			fmt.Fprintf(w, "  ... and %d more (the JSON report has them all)\n", len(ps)-20)
			break
		}
		fmt.Fprintf(w, "  %s: %s\n", safe.Line(p.String()), safe.Line(p.Why))
	}
}

// unbalancedNote says the invariant no explore judges: classify leaves it
// out of every point's "not judged", to say it once here.
const unbalancedNote = history.Unbalanced + " is never judged here (a team's journal, ledger and balances are not mapped)"

// WriteJUnit writes one testcase per point that ran (a violation fails,
// a point not judged is skipped with why); the points pruned or not
// selected by --only are one skipped testcase that counts them, and the
// suite's properties.
func (r *Result) WriteJUnit(w io.Writer) error {
	s := junitSuite{Name: "explore " + r.Workload.System.File}
	if r.Shard != nil {
		s.Name += fmt.Sprintf(" (shard %d/%d)", r.Shard.Index, r.Shard.Of)
	}
	why := map[string]int{}
	for _, p := range r.Points {
		if p.Pruned != "" {
			why[pruneKind(p.Pruned)]++
			continue
		}
		tc := junitCase{Name: p.String(), Classname: "explore." + p.Service, Time: p.Took.Seconds()}
		switch {
		case p.Outcome == Violated:
			tc.Failure = &junitFailure{Message: strings.Join(p.Broken, ", "), Text: safe.Text(p.Why)}
			s.Failures++
		case p.Outcome != Held:
			tc.Skipped = &junitSkipped{string(p.Outcome) + ": " + safe.Line(p.Why)}
		}
		s.Cases = append(s.Cases, tc)
	}
	pruned, notSel := r.prunedCounts()
	if pruned+notSel > 0 {
		s.Cases = append(s.Cases, junitCase{Name: fmt.Sprintf("%d point(s) not run", pruned+notSel), Classname: "explore.pruned",
			Skipped: &junitSkipped{"not run: " + kindCounts(why)}})
	}
	s.Properties = &junitProperties{[]junitProperty{{"points.run", fmt.Sprint(r.Run())}, {"points.pruned", fmt.Sprint(pruned)}, {"points.not_selected", fmt.Sprint(notSel)}}}
	for _, tc := range s.Cases {
		if tc.Skipped != nil {
			s.Skipped++
		}
	}
	s.Tests = len(s.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(s)
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitProperties struct {
	Property []junitProperty `xml:"property"`
}

type junitSuite struct {
	XMLName    xml.Name         `xml:"testsuite"`
	Name       string           `xml:"name,attr"`
	Tests      int              `xml:"tests,attr"`
	Failures   int              `xml:"failures,attr"`
	Skipped    int              `xml:"skipped,attr"`
	Properties *junitProperties `xml:"properties"`
	Cases      []junitCase      `xml:"testcase"`
}

// WriteJSON writes the whole result: the map, every point, the findings.
func (r *Result) WriteJSON(w io.Writer) error {
	type point struct {
		ID        int               `json:"id"`
		Service   string            `json:"service"`
		On        string            `json:"on"`
		Nth       int               `json:"nth"`
		Do        string            `json:"do"`
		Crossing  string            `json:"crossing"`
		Second    string            `json:"second,omitempty"` // depth 2: "then: TRIGGER nth=N do=A" or "also: …"
		Pruned    string            `json:"pruned,omitempty"`
		Outcome   Outcome           `json:"outcome,omitempty"`
		Broken    []string          `json:"broken,omitempty"`
		Why       string            `json:"why,omitempty"`
		NotJudged map[string]string `json:"not_judged,omitempty"`
		Seconds   float64           `json:"seconds,omitempty"`
	}
	type finding struct {
		Broken     []string  `json:"broken"`
		Faults     []string  `json:"faults"`
		Why        string    `json:"why"`
		Also       []string  `json:"also,omitempty"`
		Shrunk     string    `json:"shrunk"`
		Shrinking  Shrinking `json:"shrinking"`
		File       string    `json:"file"`
		Reproduced int       `json:"reproduced"`
		Tries      int       `json:"tries"`
	}
	out := struct {
		System   string        `json:"system"`
		Workload string        `json:"workload"`
		Shard    *ShardInfo    `json:"shard,omitempty"`
		Observed string        `json:"observed"`
		Map      Map           `json:"boundary_map"`
		Points   []point       `json:"points"`
		Findings []finding     `json:"findings"`
		Seconds  float64       `json:"seconds"`
		Random   *RandomResult `json:"random,omitempty"`
	}{System: r.Workload.System.File, Workload: r.Workload.Name, Observed: r.Observed.String(), Map: r.Map, Seconds: r.Took.Seconds(), Random: r.Random, Shard: r.Shard}
	for _, p := range r.Points {
		second := ""
		if f := p.Second; f != nil {
			second = fmt.Sprintf("%s: %s nth=%d do=%s", f.Where, f.On.On(), f.Nth, f.Do)
		}
		out.Points = append(out.Points, point{p.ID, p.Service, p.where(), p.Nth, p.Do, p.Crossing, second, p.Pruned, p.Outcome, p.Broken, safe.Text(p.Why), p.Unjudged, p.Took.Seconds()})
	}
	for _, f := range r.Findings {
		var fs []string
		for _, ft := range f.Minimal.Faults {
			fs = append(fs, r.Workload.serviceOf(ft)+" "+ft.String())
		}
		out.Findings = append(out.Findings, finding{f.Broken, fs, safe.Text(f.Why), f.Also, f.Shrunk, f.Shrink, f.File, f.Reproduced, f.Tries})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
