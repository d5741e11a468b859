package report_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// An invariant the evidence could not decide is said, with why, in every
// place a verdict shows: the console with and without -v, JSON, JUnit and
// Markdown; "no violation" lists only what was judged.
func TestNotJudgedEverywhere(t *testing.T) {
	const why = "on kafka there is no publish/ack history without a broker proxy"
	nj := map[string]string{history.Lost: why, history.AckedWithoutEffect: why, history.Unbalanced: "books not mapped"}
	pass := &report.Result{Scenario: &scenario.Scenario{Name: "team on kafka", File: "a.yaml"}, Broker: "kafka", NotJudged: nj}
	fail := &report.Result{Scenario: &scenario.Scenario{Name: "declares lost", File: "b.yaml"}, Broker: "kafka", NotJudged: nj,
		Failures: []steps.Failure{{Key: "expect_violations", Msg: "declared lost, but it could not be judged here: " + why}}}
	rep := &report.Report{Brokers: []string{"kafka"}, Results: []*report.Result{pass, fail}}

	quiet := string(report.FormatResult(pass, false))
	for _, want := range []string{"history: not judged: acked_without_effect, lost: " + why, "history: not judged: unbalanced: books not mapped"} {
		if !strings.Contains(quiet, want) {
			t.Errorf("console without -v lacks %q:\n%s", want, quiet)
		}
	}
	verbose := string(report.FormatResult(pass, true))
	_, after, _ := strings.Cut(verbose, "history: no violation (")
	judgedLine, _, _ := strings.Cut(after, ")")
	if !strings.Contains(verbose, "history: not judged: lost: "+why) || judgedLine == "" ||
		strings.Contains(judgedLine, "lost") || strings.Contains(judgedLine, "acked_without_effect") || strings.Contains(judgedLine, "unbalanced") {
		t.Errorf("console -v: want lost not judged, and no violation listing only the judged (%q):\n%s", judgedLine, verbose)
	}
	if j := pass.Judged(); strings.Contains(strings.Join(j, ","), "lost") || len(j) != len(history.InvariantNames())-3 {
		t.Errorf("judged %v", j)
	}

	var js bytes.Buffer
	if err := report.WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var doc report.JSONReport
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if s := doc.Scenarios[0]; s.NotJudged[history.Lost] != why || strings.Contains(strings.Join(s.Judged, ","), "lost") {
		t.Errorf("JSON: judged %v, not judged %v", s.Judged, s.NotJudged)
	}

	var ju bytes.Buffer
	if err := report.WriteJUnit(&ju, rep); err != nil {
		t.Fatal(err)
	}
	var junit struct {
		Suites []struct {
			Cases []struct {
				Props []struct {
					Name  string `xml:"name,attr"`
					Value string `xml:"value,attr"`
				} `xml:"properties>property"`
				Failure *struct {
					Text string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(ju.Bytes(), &junit); err != nil {
		t.Fatal(err)
	}
	cases := junit.Suites[0].Cases
	props := cases[0].Props
	if len(props) != 3 || props[1].Name != "not judged" || props[1].Value != "lost: "+why {
		t.Errorf("JUnit properties %+v", props)
	}
	if f := cases[1].Failure; f == nil || !strings.Contains(f.Text, "history not judged:\nacked_without_effect, lost: "+why) {
		t.Errorf("JUnit failure text %+v", f)
	}

	var md bytes.Buffer
	if err := report.WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| ✅ pass (3 not judged) | team on kafka |", "### ✅ team on kafka: passed, but the verdict does not cover all of it", "- acked_without_effect, lost: " + why, "### ❌ declares lost"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestMarkdownEscapesMarkup: a scenario name is text in the Markdown
// report, never HTML, a link or a comment hiding the rest.
func TestMarkdownEscapesMarkup(t *testing.T) {
	name := `x <img src=x onerror=alert(1)> [link](javascript:alert(1)) <!-- hidden | cell`
	fail := &report.Result{Scenario: &scenario.Scenario{Name: name, File: "a.yaml"}, Broker: "redis",
		Failures: []steps.Failure{{Key: "inbox.rows", Msg: "want 1, got 0"}}}
	var md bytes.Buffer
	if err := report.WriteMarkdown(&md, &report.Report{Brokers: []string{"redis"}, Results: []*report.Result{fail}}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"<img", "<!--", " [link]"} {
		if strings.Contains(md.String(), bad) {
			t.Errorf("Markdown holds %q:\n%s", bad, md.String())
		}
	}
	if want := `x &lt;img src=x onerror=alert(1)&gt; \[link\](javascript:alert(1)) &lt;!-- hidden \| cell`; !strings.Contains(md.String(), want) {
		t.Errorf("Markdown lacks the escaped name %q:\n%s", want, md.String())
	}
}

// One answer per invariant: an invariant judged for all but some parts is
// neither in "no violation" nor "not judged" as a whole, its parts are
// listed with why; one this kind of run can never judge is said under -v
// only, and in the JSON, never as a gap of the scenario.
func TestOneAnswerPerInvariant(t *testing.T) {
	r := &report.Result{Scenario: &scenario.Scenario{Name: "team", File: "a.yaml"}, Broker: "redis",
		NotJudged:    map[string]string{"stranded (entry 1-0 of accounting)": "still pending, idle 300ms"},
		Inapplicable: map[string]string{history.Unbalanced: "a team's system: books not mapped"}}
	judged := strings.Join(r.Judged(), ",")
	if strings.Contains(judged, "stranded") || strings.Contains(judged, "unbalanced") || !strings.Contains(judged, "stuck") {
		t.Errorf("Judged() = %s: want neither the part-judged stranded nor the never-judged unbalanced, stuck judged", judged)
	}
	if got := r.JudgedInPart(); len(got) != 1 || got["stranded"] != 1 {
		t.Errorf("JudgedInPart() = %v, want stranded: 1", got)
	}
	verbose := string(report.FormatResult(r, true))
	for _, want := range []string{"history: stranded judged but for 1 part(s), each not judged below",
		"history: not judged: stranded (entry 1-0 of accounting): still pending, idle 300ms",
		"history: never judged on this kind of run: unbalanced: a team's system: books not mapped"} {
		if !strings.Contains(verbose, want) {
			t.Errorf("-v lacks %q:\n%s", want, verbose)
		}
	}
	if quiet := string(report.FormatResult(r, false)); strings.Contains(quiet, "unbalanced") || !strings.Contains(quiet, "not judged: stranded (entry 1-0 of accounting)") {
		t.Errorf("without -v: want the part not judged, and nothing of unbalanced:\n%s", quiet)
	}
	var js bytes.Buffer
	if err := report.WriteJSON(&js, &report.Report{Brokers: []string{"redis"}, Results: []*report.Result{r}}); err != nil {
		t.Fatal(err)
	}
	var doc report.JSONReport
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if s := doc.Scenarios[0]; s.JudgedInPart["stranded"] != 1 || s.Inapplicable[history.Unbalanced] == "" || strings.Contains(strings.Join(s.Judged, ","), "stranded") {
		t.Errorf("JSON: judged %v, in part %v, inapplicable %v", s.Judged, s.JudgedInPart, s.Inapplicable)
	}
}
