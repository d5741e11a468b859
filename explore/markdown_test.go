package explore

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/runner"
)

// ciRun is fakeRun with what a CI summary must show apart: a point not
// judged, points --only left out (one in a row that ran, a whole row), and
// a finding with more other points than a line holds.
func ciRun(t *testing.T) *Result {
	t.Helper()
	w := defaultWorkload(t, t.TempDir())
	res := fakeRun(t, w, runner.Shard{}, filepath.Join(t.TempDir(), "found"))
	first := res.runPoints()[0]
	for _, p := range res.Points { // a whole row left out
		if p.Service == first.Service && p.where() == first.where() && p.Nth == first.Nth {
			p.Pruned, p.Verdict = "not selected (--only)", Verdict{}
		}
	}
	ran := res.runPoints()
	ran[0].Pruned, ran[0].Verdict = "not selected (--only)", Verdict{} // one of a row that ran
	ran = res.runPoints()
	ran[len(ran)-1].Verdict = Verdict{Outcome: NotJudged, Why: "stuck: the consumer never finished"}
	f := res.Findings[0]
	f.Also = nil
	for i := range 12 {
		f.Also = append(f.Also, strings.Repeat("consumer broker.request(XACK) nth=", 1)+string(rune('1'+i%9))+" do=kill")
	}
	return res
}

// TestMarkdownShowsWhatACISummaryShows: violations and the points not
// judged first; no dead column; --only's points "not selected"; the rows
// where no point ran collapsed into one line of counts; "also at" of whole
// points.
func TestMarkdownShowsWhatACISummaryShows(t *testing.T) {
	res := ciRun(t)
	var b bytes.Buffer
	if err := res.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	order := []string{"## Violations", "## Not judged", "## Coverage", "## Boundary map"}
	at := -1
	for _, h := range order {
		i := strings.Index(md, h)
		if i < at {
			t.Errorf("%q is not after the sections before it (want %v)", h, order)
		}
		at = i
	}
	for _, want := range []string{"| ⚠️ not judged | stuck: the consumer never finished |", "| not selected |", "❌ **violation: lost**",
		"more boundary row(s) where no point ran: ", "not selected by --only", "; and ", " more (the JSON report has them all)", "not selected (--only)"} {
		if !strings.Contains(md, want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md)
		}
	}
	for _, bad := range []string{"points: see the coverage below", "| fault |"} {
		if strings.Contains(md, bad) {
			t.Errorf("the Markdown still has %q:\n%s", bad, md)
		}
	}
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| `") && !strings.Contains(line, "✅") && !strings.Contains(line, "❌") && !strings.Contains(line, "⚠️") && strings.Contains(line, "pruned") {
			if !strings.Contains(line, "not selected") && strings.Count(line, "pruned")+strings.Count(line, "—") == strings.Count(line, "|")-2 {
				t.Errorf("a row where no point ran is not collapsed: %s", line)
			}
		}
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "- also at: "); ok {
			items := strings.Split(rest, "; ")
			for _, it := range items[:len(items)-1] {
				if !strings.HasSuffix(it, " do=kill") {
					t.Errorf("also at: %q is cut", it)
				}
			}
		}
	}
}

// TestJUnitOneCasePerPointThatRan: a testcase per point run, the pruned
// and not selected ones one skipped case and the suite's properties.
func TestJUnitOneCasePerPointThatRan(t *testing.T) {
	res := ciRun(t)
	var b bytes.Buffer
	if err := res.WriteJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var s struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Skipped  int `xml:"skipped,attr"`
		Props    []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"properties>property"`
		Cases []struct {
			Name    string `xml:"name,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	}
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	pruned, notSel := res.prunedCounts()
	ran := len(res.runPoints())
	if s.Tests != ran+1 || len(s.Cases) != ran+1 || s.Failures != res.Counts()[Violated] || s.Skipped != 2 {
		t.Errorf("tests %d (cases %d), failures %d, skipped %d; want %d cases (%d run + 1 for %d pruned and %d not selected), %d failures, 2 skipped\n%s",
			s.Tests, len(s.Cases), s.Failures, s.Skipped, ran+1, ran, pruned, notSel, res.Counts()[Violated], b.String())
	}
	last := s.Cases[len(s.Cases)-1]
	if last.Skipped == nil || !strings.Contains(last.Skipped.Message, "not selected by --only") || !strings.Contains(last.Skipped.Message, "duplicates") {
		t.Errorf("the pruned points' case: %+v", last)
	}
	props := map[string]string{}
	for _, p := range s.Props {
		props[p.Name] = p.Value
	}
	if props["points.pruned"] == "" || props["points.pruned"] == "0" || props["points.not_selected"] == "0" || props["points.run"] == "" {
		t.Errorf("the suite's properties: %v", props)
	}
}

// A long list of points not judged (a budget that ran out) shows the first
// ones and how many more.
func TestMarkdownNotJudgedIsBounded(t *testing.T) {
	res := ciRun(t)
	ran := res.runPoints()
	for _, p := range ran {
		p.Verdict = Verdict{Outcome: NotRun, Why: "the budget (1m0s) ran out"}
	}
	var b bytes.Buffer
	if err := res.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	want := fmt.Sprintf("… and %d more (the JSON report has them all)", len(ran)-maxNotJudged)
	if n := strings.Count(md, "| ⚠️ not explored | the budget"); len(ran) <= maxNotJudged || n != maxNotJudged || !strings.Contains(md, want) {
		t.Errorf("%d of %d points not explored listed, want %d and %q:\n%s", n, len(ran), maxNotJudged, want, md)
	}
}
