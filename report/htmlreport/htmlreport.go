// Package htmlreport writes a run's report as one self-contained HTML file
// (inline CSS and script, nothing fetched) that a person opens from a CI
// artifact: a summary, the broker matrix as a coloured grid, and per
// scenario its swim-lane timeline (report.Timeline), its violations with
// their witness highlighted on the arrows it rests on, and a replay
// command for a failure. Every string from a scenario, a service's output
// or the wire is escaped (html/template) and passed through the run's
// secret set first: a payload is hostile, a secret never reaches the file.
package htmlreport

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
)

// Options are what the report says beyond the run's results.
type Options struct {
	// Replay are the flags of the run that a replay of one scenario needs
	// besides the file and --broker ("--settle", "5s", "--system",
	// "sys.yaml"): never a server URL (its secret).
	Replay []string
	// Seed is the run's random seed, "" where it has none.
	Seed string
	// Hide hides the run's secrets (redact.URLSecrets of its server URLs)
	// in every string; nil hides passwords by their place only.
	Hide *redact.Set
	// Now stamps the report; zero: the time of writing.
	Now time.Time
}

// Write writes rep as one HTML document.
func Write(w io.Writer, rep *report.Report, opt Options) error {
	var b bytes.Buffer
	if err := page().Execute(&b, build(rep, opt)); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// Render is Write into memory (for internal/outfile, which writes a
// file whole or not at all).
func Render(rep *report.Report, opt Options) ([]byte, error) {
	var b bytes.Buffer
	err := Write(&b, rep, opt)
	return b.Bytes(), err
}

// view is the page's data: every string already cleaned (secrets hidden,
// control characters escaped, long values cut); the template escapes it.
type view struct {
	Word, Summary   string
	Version, RunID  string
	Seed, Generated string
	Passed, Failed  int
	Skipped, NotRun int
	Brokers         []string
	Matrix          []matrixRow
	Results         []resultView
	NotRunNames     []string
}

type matrixRow struct {
	Name  string
	Cells []cell
}

type cell struct {
	Class, Text, Href, Title string
}

type resultView struct {
	ID, Name, File, Broker  string
	Status, Class, Duration string
	Open                    bool
	Skipped, Settled        string
	Failures                []string
	Violations              []violationView
	NotJudged, NA           []string
	Alerts                  []string
	Replay                  string
	Timeline                *svgView
	Lanes                   []laneView
	Services                []serviceView
}

type violationView struct {
	ID, Invariant, Text string
	Declared            bool
	Witness             []string
	Drawn               int // rows of the timeline it rests on
}

type laneView struct{ Title, Detail string }

type serviceView struct{ Label, Output string }

// cleaner hides the run's secrets in a string and makes it fit to show.
type cleaner struct{ hide *redact.Set }

func (c cleaner) line(s string) string { return safe.LongLine(c.hide.Text(s)) }
func (c cleaner) name(s string) string { return safe.Line(c.hide.Text(s)) }
func (c cleaner) text(s string) string { return safe.Text(c.hide.Text(s)) }

func build(rep *report.Report, opt Options) view {
	c := cleaner{opt.Hide}
	v := view{Summary: c.line(rep.Summary()), Version: c.line(cmp.Or(rep.Version, "runner (version not recorded)")), RunID: c.name(rep.RunID),
		Seed: c.name(opt.Seed), Generated: cmp.Or(opt.Now, time.Now()).UTC().Format(time.RFC3339)}
	v.Word, _, _ = strings.Cut(v.Summary, ":")
	v.Failed, v.Skipped, v.NotRun = rep.Failed(), rep.Skipped(), len(rep.NotRun)
	v.Passed = len(rep.Results) - v.Failed - v.Skipped
	for _, b := range rep.Brokers {
		v.Brokers = append(v.Brokers, c.name(rep.Label(b)))
	}
	for i, r := range rep.Results {
		v.Results = append(v.Results, resultOf(c, r, fmt.Sprintf("s%d", i+1), opt.Replay))
	}
	if len(rep.Brokers) > 1 {
		v.Matrix = matrix(c, rep, v.Results)
	}
	for _, sc := range rep.NotRun {
		v.NotRunNames = append(v.NotRunNames, c.name(sc.Name)+" ("+c.name(sc.File)+")")
	}
	return v
}

func resultOf(c cleaner, r *report.Result, id string, replay []string) resultView {
	rv := resultView{ID: id, Name: c.name(r.Name()), File: c.name(r.Scenario.File), Broker: c.name(cmp.Or(r.Label, r.Broker)),
		Status: r.Status(), Duration: r.Duration.Round(time.Millisecond).String(), Skipped: c.line(r.Skipped), Settled: c.line(r.Settled)}
	rv.Class = rv.Status
	if rv.Status == "passed" && len(r.NotJudged) > 0 {
		rv.Class = "notjudged"
	}
	rv.Open = rv.Status == "failed"
	for _, f := range r.Failures {
		rv.Failures = append(rv.Failures, c.text(f.String()))
	}
	for _, line := range r.NotJudgedLines() {
		rv.NotJudged = append(rv.NotJudged, c.line(line))
	}
	for _, n := range r.NA {
		rv.NA = append(rv.NA, c.line(n.String()))
	}
	for _, a := range r.Alerts {
		rv.Alerts = append(rv.Alerts, c.line(a))
	}
	if rv.Status == "failed" {
		rv.Replay = c.line(replayCommand(r, replay))
	}
	for _, o := range r.Services {
		rv.Services = append(rv.Services, serviceView{Label: c.line(o.Label()), Output: c.text(strings.TrimRight(o.Output, "\n"))})
	}
	if r.Skipped == "" || len(r.Steps) > 0 {
		t := report.TimelineOf(r)
		rv.Timeline = layout(c, t, id)
		for _, l := range t.Lanes {
			rv.Lanes = append(rv.Lanes, laneView{Title: c.name(l.Title), Detail: c.line(l.Detail)})
		}
		rv.Violations = violations(c, r, t, id)
	}
	return rv
}

func violations(c cleaner, r *report.Result, t *report.Timeline, id string) []violationView {
	declared := r.Scenario.Violations(r.Broker)
	var out []violationView
	for i, v := range r.Violations {
		vv := violationView{ID: fmt.Sprintf("%s-v%d", id, i), Invariant: c.name(v.Invariant), Declared: slices.Contains(declared, v.Invariant)}
		ops := v.Witness
		v.Witness = nil
		vv.Text = c.line(strings.TrimPrefix(v.String(), v.Invariant+": "))
		for _, op := range ops {
			vv.Witness = append(vv.Witness, c.line(op.String()))
		}
		for _, row := range t.Rows {
			if slices.Contains(row.Witness, i) {
				vv.Drawn++
			}
		}
		out = append(out, vv)
	}
	return out
}

// replayCommand runs the one scenario again on its broker, with the
// run's flags that change what it does.
func replayCommand(r *report.Result, flags []string) string {
	args := append([]string{"runner", "run", r.Scenario.File, "--broker", r.Broker}, flags...)
	if r.Scenario.Variant != "" { // the file holds others
		args = append(args, "--run", "^"+regexpQuote(r.Scenario.Name)+"$")
	}
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

// matrix is the broker matrix: a row per scenario, a cell per broker,
// each linking to its result.
func matrix(c cleaner, rep *report.Report, views []resultView) []matrixRow {
	var order []*scenario.Scenario
	cells := map[*scenario.Scenario]map[string]cell{}
	for i, r := range rep.Results {
		if cells[r.Scenario] == nil {
			cells[r.Scenario] = map[string]cell{}
			order = append(order, r.Scenario)
		}
		rv := views[i]
		text := map[string]string{"passed": "pass", "failed": "FAIL", "skipped": "skip", "notjudged": "pass, not all judged"}[rv.Class]
		cells[r.Scenario][r.Broker] = cell{Class: rv.Class, Text: text, Href: "#" + rv.ID, Title: cmp.Or(rv.Skipped, strings.Join(rv.NotJudged, "; "))}
	}
	// Under --repeat a cell stands for all its runs: a flaky one must not
	// show as its last run's pass.
	for _, f := range rep.Repeats() {
		cl := cells[f.Scenario][f.Broker]
		switch {
		case f.Flaky():
			cl.Class, cl.Text = "failed", "flaky: "+f.String()
		case f.Failed > 0:
			cl.Class, cl.Text = "failed", fmt.Sprintf("FAIL (%d/%d runs)", f.Failed, f.Runs)
		default:
			cl.Text += fmt.Sprintf(" (%d runs)", f.Runs)
		}
		cells[f.Scenario][f.Broker] = cl
	}
	out := make([]matrixRow, 0, len(order))
	for _, sc := range order {
		row := matrixRow{Name: c.name(sc.Name)}
		for _, b := range rep.Brokers {
			cl, ok := cells[sc][b]
			if !ok {
				cl = cell{Class: "notrun", Text: "not run"}
			}
			row.Cells = append(row.Cells, cl)
		}
		out = append(out, row)
	}
	return out
}

// shellQuote is s as one word of a POSIX shell command.
func shellQuote(s string) string {
	plain := func(r rune) bool {
		return r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !plain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var regexpQuote = regexp.QuoteMeta
