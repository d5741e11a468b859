package report

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/steps"
)

// --- JUnit XML: one testcase per scenario or variant ---

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr"`
	Line      int           `xml:"line,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure"`
	Skipped   *junitSkipped `xml:"skipped"`
	// Properties hold the checks this broker could not read, one "n/a" each.
	Properties *junitProperties `xml:"properties"`
	SystemOut  string           `xml:"system-out,omitempty"`
}

type junitProperties struct {
	List []junitProperty `xml:"property"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"` // keeps the diff's newlines readable
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML. A failure's message is its
// first `file:line:col: key: …` line; its text holds every failure and the
// step trace.
func WriteJUnit(w io.Writer, rep *Report) error {
	s := junitSuite{Name: "outbox drill", Time: seconds(rep.Duration), Timestamp: time.Now().UTC().Format(time.RFC3339)}
	for _, r := range rep.Results {
		c := junitCase{Name: safe.Line(r.Name()), Classname: safe.Line(r.Scenario.File), File: safe.Line(r.Scenario.File), Line: r.Scenario.Pos.Line, Time: seconds(r.Duration)}
		if !r.Passed() {
			var text strings.Builder
			for _, f := range r.Failures {
				text.WriteString(safe.Text(f.String()) + "\n")
			}
			text.WriteString("\ntrace:\n")
			for _, st := range r.Steps {
				text.WriteString(strings.Join(st.traceLines(), "\n") + "\n")
			}
			if lines := r.NotJudgedLines(); len(lines) > 0 {
				text.WriteString("\nhistory not judged:\n" + safe.Text(strings.Join(lines, "\n")) + "\n")
			}
			if len(r.Services) > 0 {
				text.WriteString("\nwhat the services said:\n" + strings.Join(serviceLines(r.Services), "\n") + "\n")
			}
			c.Failure = &junitFailure{Message: safe.LongLine(summary(r.Failures[0].String())), Type: safe.Line(r.Failures[0].Key), Text: text.String()}
			s.Failures++
		}
		if r.Skipped != "" && r.Passed() {
			c.Skipped = &junitSkipped{Message: safe.LongLine(r.Skipped)}
			s.Skipped++
		}
		if len(r.NA) > 0 || len(r.NotJudged) > 0 {
			c.Properties = &junitProperties{}
			for _, n := range r.NA {
				c.Properties.List = append(c.Properties.List, junitProperty{Name: "n/a", Value: safe.LongLine(n.String())})
			}
			for _, inv := range slices.Sorted(maps.Keys(r.NotJudged)) {
				c.Properties.List = append(c.Properties.List, junitProperty{Name: "not judged", Value: safe.LongLine(inv + ": " + r.NotJudged[inv])})
			}
		}
		if len(r.Alerts) > 0 {
			c.SystemOut = safe.Text(strings.Join(r.Alerts, "\n"))
		}
		s.Cases = append(s.Cases, c)
	}
	for _, sc := range rep.NotRun {
		s.Cases = append(s.Cases, junitCase{Name: safe.Line(sc.Name), Classname: safe.Line(sc.File), File: safe.Line(sc.File), Line: sc.Pos.Line, Time: "0",
			Skipped: &junitSkipped{Message: "not run (--fail-fast, interrupt or setup error)"}})
		s.Skipped++
	}
	s.Tests = len(s.Cases)
	doc := junitSuites{Name: s.Name, Tests: s.Tests, Failures: s.Failures, Skipped: s.Skipped, Time: s.Time, Suites: []junitSuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// summary is a failure's message on one line: its first, and the got of a
// map or list check's "want …\n got …" with it (a CI summary that shows
// only the message still says what was there).
func summary(s string) string {
	line, rest, _ := strings.Cut(s, "\n")
	if got, ok := strings.CutPrefix(firstLine(rest), " got "); ok {
		return line + ", got " + got
	}
	return line
}

// Status is the result in one word: passed, failed or skipped.
func (r *Result) Status() string {
	switch {
	case !r.Passed():
		return "failed"
	case r.Skipped != "":
		return "skipped"
	}
	return "passed"
}

// --- JSON: every step with params, outcome and the state its checks read ---

// JSONReport is the document WriteJSON writes (--json): the run and every scenario.
type JSONReport struct {
	Version    string   `json:"version,omitempty"`
	RunID      string   `json:"run_id"`
	DurationMS int64    `json:"duration_ms"`
	Passed     int      `json:"passed"`
	Failed     int      `json:"failed"`
	Skipped    int      `json:"skipped"`
	NotRun     []string `json:"not_run"`
	// Repeats are, under run --repeat N, each scenario's runs on each
	// broker counted by verdict; flaky when they differ.
	Repeats   []JSONRepeat   `json:"repeats,omitempty"`
	Scenarios []JSONScenario `json:"scenarios"`
}

// JSONRepeat is the N runs of one scenario on one broker (run --repeat).
type JSONRepeat struct {
	Name    string `json:"name"`
	File    string `json:"file"`
	Broker  string `json:"broker"`
	Runs    int    `json:"runs"`
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	// Flaky: the runs did not all end the same way.
	Flaky bool `json:"flaky"`
}

// JSONScenario is one scenario on one broker.
type JSONScenario struct {
	Name   string `json:"name"`
	Broker string `json:"broker"`
	// Server names the broker's server where it is not the broker itself:
	// "kafka (kfake)" for the runner's own Kafka-protocol server.
	Server  string `json:"server,omitempty"`
	File    string `json:"file"`
	Line    int    `json:"line"`
	Variant string `json:"variant,omitempty"`
	// Run is which of Runs runs this is (run --repeat N), from 1.
	Run  int      `json:"run,omitempty"`
	Runs int      `json:"runs,omitempty"`
	Tags []string `json:"tags"`
	// Passed: it ran to its end and held; a skipped scenario did not pass.
	Passed bool `json:"passed"`
	// Status is passed, failed or skipped.
	Status     string        `json:"status"`
	Skipped    string        `json:"skipped,omitempty"`
	DurationMS int64         `json:"duration_ms"`
	SetupMS    int64         `json:"setup_ms"`
	Databases  [2]string     `json:"databases"`
	Stream     string        `json:"stream"`
	Failures   []JSONFailure `json:"failures"`
	Alerts     []string      `json:"alerts"`
	// NA are the checks this broker could not read: reported, not judged.
	NA []JSONNA `json:"na"`
	// Violations the history checker found; declared ones are expected.
	Violations []JSONViolation `json:"violations"`
	// Judged are the invariants the history checker decided; NotJudged
	// the others, each with why.
	Judged    []string          `json:"judged"`
	NotJudged map[string]string `json:"not_judged,omitempty"`
	// JudgedInPart are the invariants judged for all but the parts listed
	// in NotJudged ("stranded (entry 1-0 of accounting)"), with how many.
	JudgedInPart map[string]int `json:"judged_in_part,omitempty"`
	// Inapplicable are the invariants this kind of run can never judge
	// (unbalanced on a team's system), each with why.
	Inapplicable map[string]string `json:"inapplicable,omitempty"`
	// Settled: how a team's system settled before it was judged.
	Settled string     `json:"settled,omitempty"`
	Steps   []JSONStep `json:"steps"`
	// Services are what a team's services said: every process a start
	// step started, in start order (a system scenario only).
	Services []JSONService `json:"services,omitempty"`
}

// JSONService is one process of a team's service: the start step that
// started it, the fault armed with it, how it ended and its latest output.
type JSONService struct {
	Service string `json:"service"`
	Start   string `json:"start"`
	Fault   string `json:"fault,omitempty"`
	PID     int    `json:"pid"`
	Ended   string `json:"ended"`
	Output  string `json:"output"`
}

// JSONViolation is one violation the history checker found.
type JSONViolation struct {
	Invariant string `json:"invariant"`
	Declared  bool   `json:"declared"`
	Consumer  string `json:"consumer,omitempty"`
	EventID   string `json:"event_id,omitempty"`
	Detail    string `json:"detail"`
	// Witness are the operations it rests on, in order, each a record
	// with its prose line (text) beside it.
	Witness []JSONWitness `json:"witness,omitempty"`
}

// JSONFailure is one failed expectation, at its position.
type JSONFailure struct {
	Pos     string `json:"pos"`
	Key     string `json:"key"`
	Message string `json:"message"`
}

// JSONStep is one executed step: its parameters, faults, outcome and what its checks read.
type JSONStep struct {
	Pos        string              `json:"pos"`
	Step       string              `json:"step"`
	Label      string              `json:"label,omitempty"`
	Params     map[string]any      `json:"params"`
	Faults     []string            `json:"faults,omitempty"`
	Outcome    map[string]int64    `json:"outcome,omitempty"`
	Entries    []steps.Entry       `json:"entries,omitempty"`
	Observed   []steps.Observation `json:"observed,omitempty"`
	Details    []string            `json:"details,omitempty"`
	Failures   []JSONFailure       `json:"failures,omitempty"`
	DurationMS float64             `json:"duration_ms"`
}

func jsonFailures(fs []steps.Failure) []JSONFailure {
	out := []JSONFailure{}
	for _, f := range fs {
		out = append(out, JSONFailure{Pos: safe.Cut(f.Pos.String()), Key: safe.Cut(f.Key), Message: safe.CutLines(f.Msg)})
	}
	return out
}

// cutAll is ss with each string cut (safe.CutLines), never nil.
func cutAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = safe.CutLines(s)
	}
	return out
}

// cutEntries are es with their user values cut (a 2 MB event id).
func cutEntries(es []steps.Entry) []steps.Entry {
	out := slices.Clone(es)
	for i := range out {
		out[i].EventID, out[i].EntryID, out[i].Consumer = safe.Cut(out[i].EventID), safe.Cut(out[i].EntryID), safe.Cut(out[i].Consumer)
	}
	return out
}

// cutObserved are os with the strings of their values cut.
func cutObserved(os []steps.Observation) []steps.Observation {
	out := slices.Clone(os)
	for i := range out {
		out[i].Want, out[i].Got = safe.Value(out[i].Want), safe.Value(out[i].Got)
	}
	return out
}

// JSONNA is one state check the scenario's broker could not read.
type JSONNA struct {
	Pos    string `json:"pos"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// WriteJSON writes the report as one JSON document.
func WriteJSON(w io.Writer, rep *Report) error {
	out := JSONReport{Version: rep.Version, RunID: rep.RunID, DurationMS: rep.Duration.Milliseconds(), Failed: rep.Failed(), NotRun: []string{}}
	out.Passed = len(rep.Results) - out.Failed - rep.Skipped()
	out.Skipped = rep.Skipped()
	for _, sc := range rep.NotRun {
		out.NotRun = append(out.NotRun, safe.Cut(sc.Name))
	}
	for _, f := range rep.Repeats() {
		out.Repeats = append(out.Repeats, JSONRepeat{Name: safe.Cut(f.Name), File: safe.Cut(f.File), Broker: f.Broker, Runs: f.Runs,
			Passed: f.Passed, Failed: f.Failed, Skipped: f.Skipped, Flaky: f.Flaky()})
	}
	for _, r := range rep.Results {
		js := JSONScenario{Name: safe.Cut(r.Scenario.Name), Broker: r.Broker, Server: r.Label, File: safe.Cut(r.Scenario.File), Line: r.Scenario.Pos.Line, Variant: safe.Cut(r.Scenario.Variant), Run: r.Run, Runs: r.Runs,
			Tags: cutAll(r.Scenario.Tags), Passed: r.Passed() && r.Skipped == "", Status: r.Status(), Skipped: safe.CutLines(r.Skipped), DurationMS: r.Duration.Milliseconds(),
			SetupMS: r.Setup.Milliseconds(), Databases: [2]string{r.Where[0], r.Where[1]}, Stream: r.Where[2],
			Failures: jsonFailures(r.Failures), Alerts: cutAll(r.Alerts), Violations: []JSONViolation{}, NA: []JSONNA{},
			Judged: r.Judged(), NotJudged: r.NotJudged, JudgedInPart: nilIfEmpty(r.JudgedInPart()), Inapplicable: r.Inapplicable, Settled: safe.CutLines(r.Settled)}
		for _, n := range r.NA {
			js.NA = append(js.NA, JSONNA{Pos: safe.Cut(n.Pos.String()), Key: n.Key, Reason: safe.CutLines(n.Reason)})
		}
		for _, v := range r.Violations {
			jv := JSONViolation{Invariant: v.Invariant, Declared: slices.Contains(r.Scenario.Violations(r.Broker), v.Invariant),
				Consumer: safe.Cut(v.Consumer), EventID: safe.Cut(v.EventID), Detail: safe.CutLines(v.Detail), Witness: witnessRecords(r, v)}
			js.Violations = append(js.Violations, jv)
		}
		for _, st := range r.Steps {
			js.Steps = append(js.Steps, JSONStep{
				Pos: safe.Cut(st.Call.Pos.String()), Step: st.Call.Def.Name, Label: safe.Cut(st.Call.Label),
				Params: safe.Value(st.Call.ParamValues()).(map[string]any), Faults: st.Call.Faults(), Outcome: st.Result.Outcome,
				Entries: cutEntries(st.Result.Entries), Observed: cutObserved(st.Result.Observed), Details: cutAll(st.Result.Details),
				Failures: jsonFailures(st.Failures), DurationMS: float64(st.Duration.Microseconds()) / 1000,
			})
		}
		for _, o := range r.Services {
			js.Services = append(js.Services, JSONService{Service: o.Service, Start: safe.Cut(o.Start), Fault: safe.Cut(o.Fault), PID: o.PID,
				Ended: safe.CutLines(o.Ended), Output: safe.CutLines(o.Output)})
		}
		out.Scenarios = append(out.Scenarios, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func nilIfEmpty[V any](m map[string]V) map[string]V {
	if len(m) == 0 {
		return nil
	}
	return m
}
