package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// flakySystem writes go-payments' system file with a consumer that is
// correct on its odd starts and acks before its transaction (BUG=ack-first)
// on its even ones, counting its starts in a file of the system's dir: a
// real service whose verdict differs from run to run, in a known order.
func flakySystem(t *testing.T, bin string) string {
	t.Helper()
	src, err := os.ReadFile("../../examples/go-payments/system.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	abs, err := filepath.Abs("../../examples/go-payments")
	if err != nil {
		t.Fatal(err)
	}
	sys := strings.Replace(string(src), "run: [./run.sh, consumer]",
		`run: [sh, -c, 'n=$(cat starts 2>/dev/null || echo 0); echo $((n+1)) > starts; if [ $((n % 2)) = 1 ]; then export BUG=ack-first; fi; export PAYMENTS_BIN=`+bin+`; exec `+abs+`/run.sh consumer']`, 1)
	sys = strings.Replace(sys, "run: [./run.sh, relay]", "run: ["+bin+", relay]", 1)
	sys = strings.Replace(sys, "schema: {producer: producer.sql, consumer: consumer.sql}",
		"schema: {producer: "+abs+"/producer.sql, consumer: "+abs+"/consumer.sql}", 1)
	if !strings.Contains(sys, "ack-first") || !strings.Contains(sys, abs+"/consumer.sql") {
		t.Fatalf("go-payments' system file changed; the flaky copy did not take:\n%s", sys)
	}
	p := filepath.Join(dir, "system.yaml")
	if err := os.WriteFile(p, []byte(sys), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunRepeatFlaky: --repeat 3 on a scenario whose service alternates
// between correct and ack-first: runs 1 and 3 pass, run 2 fails; the
// summary names it flaky with its counts, exit 1, and the JSON and JUnit
// carry each run.
func TestRunRepeatFlaky(t *testing.T) {
	t.Parallel()
	sys := flakySystem(t, paymentsService(t))
	dir := t.TempDir()
	js, ju := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.xml")
	code, out, errs := cli(t, "run", "--repeat", "3", "--parallel", "1", "--system", sys, "--json", js, "--junit", ju,
		"../../examples/go-payments/scenarios/commit-fails-after-ack.yaml")
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (a run failed):\n%s\n%s", code, out, errs)
	}
	if !regexp.MustCompile(`(?m)^flaky: payments: the consumer's COMMIT fails .* \(.*commit-fails-after-ack.yaml\): 2/3 passed, 1 failed \(first: run 2\)$`).MatchString(out) ||
		!strings.Contains(out, "repeat: 1 scenario(s) × 3 runs: 1 flaky, 0 passed every run, 0 failed every run") {
		t.Errorf("summary does not name the flaky scenario with its counts:\n%s", out)
	}
	var rep struct {
		Repeats []struct {
			Runs, Passed, Failed int
			Flaky                bool
		} `json:"repeats"`
		Scenarios []struct {
			Run, Runs int
			Status    string
		} `json:"scenarios"`
	}
	b, err := os.ReadFile(js)
	if err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("json: %v\n%s", err, b)
	}
	if len(rep.Repeats) != 1 || rep.Repeats[0].Runs != 3 || rep.Repeats[0].Passed != 2 || rep.Repeats[0].Failed != 1 || !rep.Repeats[0].Flaky {
		t.Errorf("json repeats: %+v", rep.Repeats)
	}
	var got []string
	for _, s := range rep.Scenarios {
		got = append(got, strings.Join([]string{string(rune('0' + s.Run)), string(rune('0' + s.Runs)), s.Status}, " "))
	}
	if strings.Join(got, ",") != "1 3 passed,2 3 failed,3 3 passed" {
		t.Errorf("json scenarios' run, runs, status: %v", got)
	}
	checkTeamJSON(t, b)
	x, _ := os.ReadFile(ju)
	for k := 1; k <= 3; k++ {
		if !strings.Contains(string(x), "(run "+string(rune('0'+k))+"/3)") {
			t.Errorf("junit lacks run %d:\n%s", k, x)
		}
	}
}

// TestRunRepeatStable: a scenario that passes passes every run, one that
// fails fails every run: neither is flaky, and the summary says so.
func TestRunRepeatStable(t *testing.T) {
	t.Parallel()
	pass := scenarioFile(t, "pass.yaml", "name: one event\nsteps:\n  - produce(event=e1)\n  - relay\n  - consume\n  - expect: {inbox.rows: {accounting: 1}}\n")
	code, out, errs := cli(t, "run", "--repeat", "3", pass)
	if code != 0 || strings.Contains(out, "flaky:") || !strings.Contains(out, "repeat: 1 scenario(s) × 3 runs: 0 flaky, 1 passed every run, 0 failed every run") ||
		!strings.Contains(out, "ok: 3 passed, 0 failed, 3 scenarios") {
		t.Errorf("stable pass: exit %d\n%s\n%s", code, out, errs)
	}
	fail := scenarioFile(t, "fail.yaml", "name: wrong count\nsteps:\n  - produce(event=e1)\n  - relay\n  - consume\n  - expect: {inbox.rows: {accounting: 2}}\n")
	code, out, errs = cli(t, "run", "--repeat", "2", fail)
	if code != exitFailed || strings.Contains(out, "flaky:") || !strings.Contains(out, "failed every run: wrong count") ||
		!strings.Contains(out, "0/2 passed, 2 failed (first: run 1)") || strings.Count(out, "--- FAIL: wrong count (run ") != 2 {
		t.Errorf("stable fail: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := run0("run", "--repeat", "2", "--guarantees", "g.md", pass); code != 2 || !strings.Contains(errs, "not with --repeat") {
		t.Errorf("--repeat with --guarantees: exit %d, %s", code, errs)
	}
	if code, _, errs := run0("run", "--repeat", "0", pass); code != 2 || !strings.Contains(errs, `--repeat "0": want a whole number, 1 or more`) {
		t.Errorf("--repeat 0: exit %d, %s", code, errs)
	}
}

// checkTeamJSON holds the JSON report of the flaky run (run 2 acked before
// its COMMIT) to its schema, docs/report.schema.json: snake_case keys
// (start's fault: {on, do, nth}, not Go's On, Do, Nth) and the witness as
// records naming the service, its start, the wire operation and when.
func checkTeamJSON(t *testing.T, b []byte) {
	t.Helper()
	if err := validateReportJSON(t, b); err != nil {
		t.Errorf("the report does not match docs/report.schema.json: %v", err)
	}
	if m := regexp.MustCompile(`"(On|Nth|Do|Optional)":`).Find(b); m != nil {
		t.Errorf("a Go field name in the JSON: %s", m)
	}
	var rep struct {
		Scenarios []struct {
			Steps []struct {
				Step   string         `json:"step"`
				Params map[string]any `json:"params"`
			} `json:"steps"`
			Violations []struct {
				Invariant string `json:"invariant"`
				Witness   []struct {
					Text, Kind, Step, Service, Start, Wire string
					Acked                                  bool
					TimeMS                                 *float64 `json:"time_ms"`
					StepIndex                              *int     `json:"step_index"`
				} `json:"witness"`
			} `json:"violations"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Scenarios) != 3 {
		t.Fatalf("json: %v", err)
	}
	fault := ""
	for _, st := range rep.Scenarios[1].Steps {
		if f, ok := st.Params["fault"].(map[string]any); ok && st.Step == "start" {
			fault = fmt.Sprint(f)
		}
	}
	if fault != "map[do:error nth:1 on:consumer_db.commit(table=processed_messages)]" {
		t.Errorf("start's fault in the JSON: %s", fault)
	}
	var got []string
	for _, v := range rep.Scenarios[1].Violations {
		for _, w := range v.Witness {
			switch {
			case w.Service != "":
				if w.TimeMS == nil || w.StepIndex != nil || !strings.Contains(w.Start, "commit-fails-after-ack.yaml:") || w.Text == "" {
					t.Errorf("%s: a wire record without its time, start or text: %+v", v.Invariant, w)
				}
				got = append(got, fmt.Sprintf("%s: %s %s %s acked=%v", v.Invariant, w.Service, w.Wire, w.Kind, w.Acked))
			case w.StepIndex == nil || w.TimeMS == nil:
				t.Errorf("%s: a step record without its index or time: %+v", v.Invariant, w)
			}
		}
	}
	want := "acked_without_effect: consumer XREADGROUP delivered acked=true"
	if !slices.Contains(got, want) || !slices.Contains(got, "lost: relay XADD published acked=false") {
		t.Errorf("witness records: %q, want %q and the relay's XADD", got, want)
	}
}

// validateReportJSON validates a --json report against docs/report.schema.json.
func validateReportJSON(t *testing.T, b []byte) error {
	t.Helper()
	schema, err := os.ReadFile("../../docs/report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("report.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("report.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}
