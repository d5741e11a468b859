package report_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
)

// reportRun runs one passing and one failing scenario that together use
// every shape the diagrams draw, including text Mermaid would choke on.
func reportRun(t *testing.T) *report.Report {
	t.Helper()
	pass := scenariotest.ParseOne(t, "name: passes\ntags: [a]\nsteps:\n  - produce: {aggregate: acct-1}\n  - relay\n  - consume\n  - expect: {inbox.rows: 1}\n")
	fail := scenariotest.ParseOne(t, `name: fails | with a pipe
steps:
  - produce(event="x#1;<b>", amount=5)
  - produce(fail=divzero)
  - relay(skip_mark)
  - relay
  - publish: {amount: 6}
  - consume: {fail: divzero, max_deliveries: 1}
  - sleep(for=1ms)
  - replay_dlq
  - claim: {worker: w2}
  - consume: {skip_ack: true}
  - expect: {stream.entries: 6, projection: {accounting: {USD: {amount: 1, events: 1}}}}
`)
	rep, err := runner.Run(t.Context(), runner.Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}, []*scenario.Scenario{pass, fail})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() != 1 {
		t.Fatalf("want one failure, got %s", rep.Summary())
	}
	return rep
}

func TestJUnitReport(t *testing.T) {
	rep := reportRun(t)
	var buf bytes.Buffer
	if err := report.WriteJUnit(&buf, rep); err != nil {
		t.Fatal(err)
	}
	// Read back with the JUnit shape CI tools read, not the writer's types.
	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suites   []struct {
			Cases []struct {
				Name      string `xml:"name,attr"`
				Classname string `xml:"classname,attr"`
				Time      string `xml:"time,attr"`
				Failure   *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("JUnit does not parse: %v\n%s", err, buf.String())
	}
	s := doc.Suites[0]
	if doc.Tests != 2 || doc.Failures != 1 || len(s.Cases) != 2 || s.Cases[0].Failure != nil {
		t.Fatalf("counts: %+v", doc)
	}
	f := s.Cases[1].Failure
	if f == nil || !regexp.MustCompile(`^t\.yaml:\d+:\d+: projection: want \{accounting.*\}, got \{accounting`).MatchString(f.Message) ||
		!strings.Contains(f.Text, "- accounting.USD.amount: 1\n+ accounting.USD.amount: 5") || !strings.Contains(f.Text, "trace:\nt.yaml:3:5: produce") {
		t.Errorf("failure: %+v", f)
	}
	if s.Cases[1].Name != "fails | with a pipe" || s.Cases[1].Classname != "t.yaml" || s.Cases[1].Time == "" {
		t.Errorf("testcase: %+v", s.Cases[1])
	}
}

func TestJSONReport(t *testing.T) {
	rep := reportRun(t)
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var doc report.JSONReport
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Passed != 1 || doc.Failed != 1 || len(doc.Scenarios) != 2 {
		t.Fatalf("counts: %+v", doc)
	}
	steps := doc.Scenarios[1].Steps
	if p := steps[0].Params; p["event"] != "x#1;<b>" || p["amount"] != float64(5) {
		t.Errorf("params: %v", p)
	}
	if steps[1].Faults[0] != "fail=divzero" || steps[1].Outcome["failed"] != 1 {
		t.Errorf("fault step: %+v", steps[1])
	}
	last := steps[len(steps)-1]
	if len(last.Observed) != 2 || !last.Observed[0].OK || last.Observed[1].OK || len(last.Failures) != 1 || last.Failures[0].Key != "projection" {
		t.Errorf("expect step: %+v", last)
	}
	if e := steps[2].Entries; len(e) != 1 || e[0].Outcome != "published" || e[0].EntryID == "" {
		t.Errorf("relay entries: %+v", e)
	}
}

// mermaidLine is the grammar of every line the diagrams may hold.
var mermaidLine = regexp.MustCompile(`^(sequenceDiagram|  participant (PPG|R|B|CPG) as [A-Za-z ]+|  (PPG|R|B|CPG)(->>|-->>)(PPG|R|B|CPG): [^;#<>\n]+|  Note over (PPG|R|B|CPG)(,(PPG|R|B|CPG))?: [^;#<>\n]+)$`)

func TestMarkdownReportAndDiagrams(t *testing.T) {
	rep := reportRun(t)
	var buf bytes.Buffer
	if err := report.WriteMarkdown(&buf, rep); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, want := range []string{
		"## Outbox drill: 1 passed, 1 failed",
		"| ✅ pass | passes | `t.yaml` |",
		"| ❌ **FAIL** | fails \\| with a pipe | `t.yaml` |",
		"### ❌ fails \\| with a pipe",
		"Note over PPG: FAULT fail=divzero",
		"Note over R: FAULT skip_mark",
		"Note over CPG: FAULT skip_ack",
		"Note over B: to the dead-letter stream: ",
		"Note over B: replay from the dead-letter stream, XADD ",
		"Note over PPG,CPG: sleep(for=1ms)",
		"Note over PPG,CPG: FAIL projection: want {accounting",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	blocks := regexp.MustCompile("(?s)```mermaid\n(.*?)```").FindAllStringSubmatch(md, -1)
	if len(blocks) != 1 {
		t.Fatalf("want one diagram (for the one failure), got %d", len(blocks))
	}
	for _, line := range strings.Split(strings.TrimSuffix(blocks[0][1], "\n"), "\n") {
		if !mermaidLine.MatchString(line) {
			t.Errorf("line outside the emitted grammar: %q", line)
		}
	}
	checkWithMermaid(t, md)
}

// checkWithMermaid parses the diagrams with Mermaid itself when MERMAID_CHECK
// names internal/mermaidcheck with its node_modules installed (CI does).
func checkWithMermaid(t *testing.T, md string) {
	dir := os.Getenv("MERMAID_CHECK")
	if dir == "" {
		t.Log("MERMAID_CHECK not set: diagrams checked against the emitted grammar only")
		return
	}
	f := filepath.Join(t.TempDir(), "report.md")
	if err := os.WriteFile(f, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", filepath.Join(dir, "check.mjs"), f).CombinedOutput()
	if err != nil {
		t.Fatalf("Mermaid rejects the diagram: %v\n%s\n%s", err, out, md)
	}
}

func TestMain(m *testing.M) { testservers.Main(m) }

// A skipped scenario is neither passed nor failed in the JSON report, and
// the run counts it.
func TestJSONReportCountsSkipped(t *testing.T) {
	rep := &report.Report{Results: []*report.Result{
		{Scenario: &scenario.Scenario{Name: "ran", File: "a.yaml"}},
		{Scenario: &scenario.Scenario{Name: "skipped", File: "b.yaml"}, Skipped: "b.yaml:1:7: needs claim_by_idle"},
	}}
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var doc report.JSONReport
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Passed != 1 || doc.Failed != 0 || doc.Skipped != 1 {
		t.Errorf("counts: passed %d failed %d skipped %d; want 1 0 1", doc.Passed, doc.Failed, doc.Skipped)
	}
	if s := doc.Scenarios[1]; s.Passed || s.Status != "skipped" {
		t.Errorf("the skipped scenario: passed %v status %q; want false, skipped", s.Passed, s.Status)
	}
	if s := doc.Scenarios[0]; !s.Passed || s.Status != "passed" {
		t.Errorf("the passing scenario: passed %v status %q", s.Passed, s.Status)
	}
}
