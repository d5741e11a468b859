package htmlreport_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/report/htmlreport"
	"github.com/outboxdrill/runner/report/internal/teamfixture"
)

func render(t *testing.T, rep *report.Report, opt htmlreport.Options) string {
	t.Helper()
	b, err := htmlreport.Render(rep, opt)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// evil is what a hostile payload, event id or service name may hold.
const evil = `<script>alert(1)</script>"><img src=x onerror=alert(2)>` + "\x1b[2J"

// What a team's system controls reaches the file escaped, and the run's
// secrets (and any password by its place) never reach it; the file asks
// for nothing from the network.
func TestHTMLEscapesAndHidesSecrets(t *testing.T) {
	const secret = "pw-s3cr3t-9"
	r := teamfixture.Result(t, evil, secret)
	rep := &report.Report{Version: "runner v1.2.3", RunID: "r1", Brokers: []string{"redis"}, Results: []*report.Result{r}}
	doc := render(t, rep, htmlreport.Options{Hide: redact.NewSet(secret), Replay: []string{"--settle", "1s"}})
	for _, bad := range []string{"<script>alert", "<img", "onerror=alert(2)>", "\x1b", secret, "<link", "@import", "src=\"http", "href=\"http"} {
		if strings.Contains(doc, bad) {
			t.Errorf("the report holds %q", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `\x1b[2J`, "redis://app:***@127.0.0.1:6379/", "Content-Security-Policy", "default-src 'none'"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// The only scripts are the report's own, inline.
	if n := strings.Count(doc, "<script"); n != 1 || strings.Contains(doc, "<script src") {
		t.Errorf("%d script elements, want the report's own one", n)
	}
}

// A team's failure: its timeline is drawn as lanes, arrows, the fault's
// marks, the settle window and the violation lit on its witness rows, and
// a replay command says how to run it again.
func TestHTMLTeamTimelineDrawn(t *testing.T) {
	r := teamfixture.Result(t, "", "")
	r.Matrix = true
	rep := &report.Report{Version: "runner v1.2.3 (abc, go1.26)", RunID: "r1", Brokers: []string{"redis"}, Results: []*report.Result{r}}
	doc := render(t, rep, htmlreport.Options{Replay: []string{"--settle", "1s", "--system", "my system.yaml"}, Seed: "42"})
	counts := map[string]int{
		`<g class="lane process killed">`: 1, `<g class="lane process">`: 2, `<g class="lane database">`: 2, `<g class="lane broker">`: 1,
		`<g class="row arrow`: 11, `<g class="row arrow fault">`: 2, `<g class="row mark fault">`: 2, `class="row arrow witness" data-v="s1-v0"`: 2,
		`<rect class="settle"`: 1, `<li class="violation" data-v="s1-v0"`: 1,
	}
	for s, n := range counts {
		if got := strings.Count(doc, s); got != n {
			t.Errorf("%d × %s, want %d", got, s, n)
		}
	}
	for _, want := range []string{
		"⚡ FAULT " + teamfixture.RelayKill + ": held, then the process killed",
		">XREADGROUP → empty ×3</text>",
		"runner run t.yaml --broker redis --settle 1s --system &#39;my system.yaml&#39;",
		`<code>runner v1.2.3 (abc, go1.26)</code>`, `<div class="card meta" id="seed">seed<br><code>42</code>`,
		"(witness on 2 row(s) of the timeline)",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// The broker matrix is a coloured grid: a row per scenario, a cell per
// broker of the run, each linking to its result.
func TestHTMLBrokerMatrix(t *testing.T) {
	sc := scenariotest.ParseOne(t, "name: m\nsteps:\n  - produce\n")
	res := func(b, skip string, notJudged map[string]string) *report.Result {
		return &report.Result{Scenario: sc, Broker: b, Matrix: true, Skipped: skip, NotJudged: notJudged}
	}
	rep := &report.Report{Brokers: []string{"redis", "nats", "rabbitmq", "kafka"}, Labels: map[string]string{"kafka": "kafka (kfake)"},
		Results: []*report.Result{res("redis", "", nil), res("rabbitmq", "t.yaml:1:1: needs claim_by_idle", nil), res("kafka", "", map[string]string{"lost": "why"})}}
	doc := render(t, rep, htmlreport.Options{})
	row := regexp.MustCompile(`(?s)<table class="matrix" id="matrix">.*?</table>`).FindString(doc)
	cells := regexp.MustCompile(`<td class="cell (\w+)"`).FindAllStringSubmatch(row, -1)
	var got []string
	for _, c := range cells {
		got = append(got, c[1])
	}
	if strings.Join(got, " ") != "passed notrun skipped notjudged" || !strings.Contains(row, "<th>kafka (kfake)</th>") || !strings.Contains(row, `<a href="#s1">pass</a>`) {
		t.Errorf("matrix cells %v:\n%s", got, row)
	}
}
