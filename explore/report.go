package explore

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"slices"
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
		fmt.Fprintf(w, "no violation at the points that ran; %s\n", unbalancedNote)
		return
	}
	r.findingLines(w)
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
			fmt.Fprintf(w, "    also at: %s\n", safe.Line(strings.Join(f.Also, "; ")))
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

// WriteMarkdown writes the coverage report: the boundary map, then a
// boundary × action table per service.
func (r *Result) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Explore: %s\n\nWorkload: %s. ", r.Workload.System.File, r.Workload.Name)
	if r.Shard != nil {
		fmt.Fprintf(&b, "%s. ", r.Shard)
	}
	if r.Observed.Outcome != Held {
		fmt.Fprintf(&b, "The workload fails without any fault: %s\n", r.Observed)
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "%d point(s) run, %d pruned, %d violation(s), %s; %s.\n\n## Boundary map\n\n", r.Run(), len(r.Points)-len(r.runPoints()), len(r.Findings), r.Took.Round(time.Second), unbalancedNote)
	for _, s := range r.Map.Services {
		fmt.Fprintf(&b, "**%s** (started at %s)\n\n| boundary | crossed | fault |\n|---|---|---|\n", s.Service, s.Pos)
		for _, bd := range s.Boundaries {
			fmt.Fprintf(&b, "| `%s` | %d | %s |\n", bd.Label, bd.Count, orDash(bd.Skip, "points: see the coverage below"))
		}
		b.WriteString("\n")
	}
	r.coverageTables(&b)
	if len(r.Findings) > 0 {
		b.WriteString("## Violations\n\n")
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "- **%s** — %s: %s. Shrunk: %s; %s. Written: `%s`\n", strings.Join(f.Broken, ", "), faultList(r.Workload, f.Minimal.Faults), f.Why, f.Shrunk, f.Reproduces(), f.File)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// coverageTables: per service, a row per trigger and nth, a column per
// action, each cell the point's outcome.
func (r *Result) coverageTables(b *strings.Builder) {
	actions := map[string]bool{}
	rows := map[string]map[string]*Point{}
	var order []string
	for _, p := range r.Points {
		row := fmt.Sprintf("%s | `%s` nth=%d", p.Service, p.where(), p.Nth)
		if rows[row] == nil {
			rows[row] = map[string]*Point{}
			order = append(order, row)
		}
		rows[row][p.Do] = p
		actions[p.Do] = true
	}
	acts := slices.Sorted(maps.Keys(actions))
	b.WriteString("## Coverage\n\n| service | boundary | " + strings.Join(acts, " | ") + " |\n|---|---|" + strings.Repeat("---|", len(acts)) + "\n")
	for _, row := range order {
		cells := make([]string, len(acts))
		for i, a := range acts {
			cells[i] = cell(rows[row][a])
		}
		fmt.Fprintf(b, "| %s | %s |\n", row, strings.Join(cells, " | "))
	}
	b.WriteString("\n")
}

func cell(p *Point) string {
	switch {
	case p == nil:
		return "—"
	case p.Pruned != "":
		return "pruned"
	case p.Outcome == Violated:
		return "**violation: " + strings.Join(p.Broken, ", ") + "**"
	}
	return string(p.Outcome)
}

func orDash(s, empty string) string {
	if s == "" {
		return empty
	}
	return "no: " + s
}

// WriteJUnit writes one testcase per point that ran (pruned ones are
// skipped testcases with why).
func (r *Result) WriteJUnit(w io.Writer) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Time      float64  `xml:"time,attr"`
		Failure   *failure `xml:"failure,omitempty"`
		Skipped   *skipped `xml:"skipped,omitempty"`
	}
	type suite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	s := suite{Name: "explore " + r.Workload.System.File}
	if r.Shard != nil {
		s.Name += fmt.Sprintf(" (shard %d/%d)", r.Shard.Index, r.Shard.Of)
	}
	for _, p := range r.Points {
		tc := testcase{Name: p.String(), Classname: "explore." + p.Service, Time: p.Took.Seconds()}
		switch {
		case p.Pruned != "":
			tc.Skipped = &skipped{"pruned: " + p.Pruned}
		case p.Outcome == Violated:
			tc.Failure = &failure{Message: strings.Join(p.Broken, ", "), Text: safe.Text(p.Why)}
			s.Failures++
		case p.Outcome != Held:
			tc.Skipped = &skipped{string(p.Outcome) + ": " + safe.Line(p.Why)}
		}
		if tc.Skipped != nil {
			s.Skipped++
		}
		s.Cases = append(s.Cases, tc)
	}
	s.Tests = len(s.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	return enc.Encode(s)
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
		Broken     []string `json:"broken"`
		Faults     []string `json:"faults"`
		Why        string   `json:"why"`
		Also       []string `json:"also,omitempty"`
		Shrunk     string   `json:"shrunk"`
		File       string   `json:"file"`
		Reproduced int      `json:"reproduced"`
		Tries      int      `json:"tries"`
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
		out.Findings = append(out.Findings, finding{f.Broken, fs, safe.Text(f.Why), f.Also, f.Shrunk, f.File, f.Reproduced, f.Tries})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
