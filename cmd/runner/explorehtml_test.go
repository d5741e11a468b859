package main

import (
	"github.com/outboxdrill/runner/proxy/fault"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/explore"
	"github.com/outboxdrill/runner/report/htmlreport"
	"github.com/outboxdrill/runner/system"
)

// Explore's coverage as a picture: a row per service, boundary and nth, a
// cell per action coloured by outcome (a point --only left out is "not
// selected", not "pruned"), a violation's cell linking to its finding's
// timeline page; rows where every point was pruned folded away.
func TestHTMLExploreCoverage(t *testing.T) {
	dir := t.TempDir()
	bad := &explore.Point{Service: "consumer", On: trigger("consumer_db.commit(table=inbox)"), Nth: 1, Do: "kill", Verdict: explore.Verdict{Outcome: explore.Violated, Why: "lost: …"}}
	res := &explore.Result{Workload: &explore.Workload{Name: "w", System: &system.System{File: "sys.yaml"}},
		Points: []*explore.Point{
			{Service: "consumer", On: trigger("consumer_db.commit(table=inbox)"), Nth: 1, Do: "error", Verdict: explore.Verdict{Outcome: explore.Held}},
			bad,
			{Service: "consumer", On: trigger("broker.reply(XACK)"), Nth: 1, Do: "error", Pruned: "not selected (--only)"},
			{Service: "consumer", On: trigger("broker.reply(XACK)"), Nth: 1, Do: "kill", Pruned: "a duplicate"},
			{Service: "relay", On: trigger("broker.reply(XADD)"), Nth: 9, Do: "kill", Pruned: "past the nth cap"},
		},
		Findings: []*explore.Finding{{Point: bad, Broken: []string{"lost"}, Why: "lost: …", Shrunk: "2 → 1 event(s)", File: filepath.Join(dir, "out", "explore-lost.yaml"),
			Minimal: explore.Variant{Faults: []explore.Fault{{On: bad.On, Nth: 1, Do: "kill"}}}}},
	}
	c := coverageOf(res, filepath.Join(dir, "html"))
	data, err := htmlreport.RenderCoverage(c, htmlreport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	grid := regexp.MustCompile(`(?s)<table class="coverage" id="coverage">.*?</table>`).FindString(doc)
	var got []string
	for _, m := range regexp.MustCompile(`<td class="cell (\w+)"`).FindAllStringSubmatch(grid, -1) {
		got = append(got, m[1])
	}
	if strings.Join(got, " ") != "held violation notselected pruned" {
		t.Errorf("the grid's cells %v, want held violation, then not selected and pruned", got)
	}
	for _, want := range []string{`<a href="finding-1.html">violation</a>`, `<th>error</th><th>kill</th>`, "1 row(s) where every point was pruned",
		`<a href="../out/explore-lost.yaml">the minimal scenario</a>`, "consumer_db.commit(table=inbox) nth=1 do=kill"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if bin := chromiumOrEmpty(); bin != "" {
		page := filepath.Join(dir, "index.html")
		if err := os.WriteFile(page, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if dom := headless(t, bin, page, "--dump-dom"); !strings.Contains(dom, `<td class="cell violation"`) {
			t.Errorf("chromium's DOM lacks the violation's cell")
		}
	}
}

// trigger is a fault's place (on:) as a scenario writes it.
func trigger(text string) fault.Trigger {
	t, _ := fault.Parse(fault.Spec{On: text, Nth: 1, Do: "kill"}, nil)
	t.Nth, t.Action = 0, fault.Action{}
	return t
}
