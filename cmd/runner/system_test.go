package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	bin     string
	binErr  error
)

// asRunnerEnv set to 1 makes this test binary run the runner's main
// instead of the tests.
const asRunnerEnv = "OUTBOXDRILL_TEST_AS_RUNNER"

// runnerBin is an executable that runs the runner: a script that runs this
// test binary as the runner's main (the code go build would link, without
// linking it again: ~4 CPU seconds). The reference services of a system
// file run it as `${runner} reference relay|consumer`, and tests run it
// where they need a process of its own (to kill it, to see its exit).
func runnerBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		self, err := os.Executable()
		if err != nil {
			binErr = err
			return
		}
		dir, err := os.MkdirTemp("", "runner-bin-")
		if err != nil {
			binErr = err
			return
		}
		bin = filepath.Join(dir, "runner")
		script := fmt.Sprintf("#!/bin/sh\n%s=1 exec %s \"$@\"\n", asRunnerEnv, shellQuote(self))
		binErr = os.WriteFile(bin, []byte(script), 0o755)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return bin
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func TestReferenceProcessesThroughTheProxies(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	code, out, errOut := cli(t, "run", "../../examples/reference")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "6 passed, 0 failed") {
		t.Errorf("want the six reference drills to pass:\n%s", out)
	}
}

// A system scenario's checks can fail, a fault that never fires fails its
// scenario, and a service the system file lacks is a load error.
func TestSystemScenariosCanFail(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	sys, err := filepath.Abs("../../examples/reference/system.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wrong := scenarioFile(t, "wrong.yaml", `name: seed-3 with a wrong expectation
system: `+sys+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: {service: consumer, fault: {on: "consumer_db.commit(table=inbox)", do: kill}}
  - expect: {inbox.rows: 2, within: 3s}
`)
	code, out, _ := cli(t, "run", wrong)
	if code != exitFailed || !strings.Contains(out, "inbox.rows:") || !strings.Contains(out, "want 2, got 1") || !strings.Contains(out, "service consumer (started at "+wrong+":6:5, fault consumer_db.commit(table=inbox) do=kill, killed by the fault; pid ") {
		t.Errorf("a wrong expectation: exit %d, want 1 naming inbox.rows, with the services' output:\n%s", code, out)
	}
	never := scenarioFile(t, "never.yaml", `name: a fault on a table nobody writes
system: `+sys+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: {service: consumer, fault: {on: "consumer_db.commit(table=held)", do: kill}}
  - expect: {inbox.rows: 1, within: 5s}
`)
	code, out, _ = cli(t, "run", never)
	if code != exitFailed || !strings.Contains(out, "never fired") {
		t.Errorf("a fault that never fires: exit %d, want 1 saying so:\n%s", code, out)
	}
	// The same fault optional (as runner explore writes a finding's): a
	// service that never crosses the boundary passes.
	optional := scenarioFile(t, "optional.yaml", strings.Replace(mustRead(t, never), "do: kill}", "do: kill, optional: true}", 1))
	if code, out, _ = cli(t, "run", optional); code != exitOK {
		t.Errorf("an optional fault that never fires: exit %d, want 0:\n%s", code, out)
	}
	typo := scenarioFile(t, "typo.yaml", `name: a typo
system: `+sys+`
steps:
  - start: consumr
`)
	code, _, errOut := cli(t, "run", typo)
	if code != exitInvalid || !strings.Contains(errOut, `typo.yaml:4:5: start: no service "consumr"`) || !strings.Contains(errOut, `did you mean "consumer"?`) {
		t.Errorf("a misspelt service: exit %d, want 2 with file:line:col and did-you-mean:\n%s", code, errOut)
	}
}

// The foreign-stack example: a Node relay and consumer (pg + ioredis)
// drilled unchanged. The correct consumer passes the seed windows; the
// ack-first one fails them, and the history checker names its violation.
func TestNodeExample(t *testing.T) {
	t.Parallel()
	needNode(t, "pg")
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		code, out, errOut := cli(t, "run", "--system", "../../examples/node/system.yaml", "../../examples/node/scenarios")
		if code != exitOK {
			t.Fatalf("the correct Node services: exit %d, want 0\n%s\n%s", code, out, errOut)
		}
	})
	t.Run("ack-first", func(t *testing.T) {
		t.Parallel()
		code, out, _ := cli(t, "run", "--system", "../../examples/node/system-ack-first.yaml", withinCut(t, "../../examples/node/scenarios", 3*time.Second))
		for _, want := range []string{"lost: consumer accounting, event bus-1", "acked_without_effect: consumer accounting, event bus-1"} {
			if code != exitFailed || !strings.Contains(out, want) {
				t.Errorf("the ack-first Node consumer: exit %d, want 1 naming %q:\n%s", code, want, out)
			}
		}
	})
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// pids hides the process ids a trace shows, for exact comparison.
var pids = regexp.MustCompile(`pid [0-9]+`)

// lineOf is the line of out that starts with prefix (after its indent),
// pids hidden; "" when there is none.
func lineOf(out, prefix string) string {
	for _, line := range strings.Split(pids.ReplaceAllString(out, "pid N"), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// What the services said: every process a start step started, the killed
// one too, in start order, each labelled by its start step and how it
// ended; in the failure trace, in the JSON report, and with -v for a
// passing scenario. A start's trace line shows the fault it armed.
func TestWhatTheServicesSaid(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	sys, err := filepath.Abs("../../examples/reference/system.yaml")
	if err != nil {
		t.Fatal(err)
	}
	steps := `system: ` + sys + `
steps:
  - produce(event=bus-1)
  - start: relay
  - start: {service: consumer, fault: {on: "consumer_db.commit(table=inbox)", do: kill}}
  - expect: {inbox.rows: 1, stream.pending: 1, within: 5s}
  - start: consumer
  - stop: relay
`
	failing := scenarioFile(t, "failing.yaml", "name: a wrong last expectation\n"+steps+"  - expect: {inbox.rows: 2, within: 1s}\n")
	report := filepath.Join(t.TempDir(), "report.json")
	code, out, _ := cli(t, "run", "--json", report, failing)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{
		failing + ":6:5: start(service=consumer, fault={on: consumer_db.commit(table=inbox), do: kill})",
		"service relay (started at " + failing + ":5:5, stopped by the stop step at " + failing + ":9:5; pid N) output:",
		"service consumer (started at " + failing + ":6:5, fault consumer_db.commit(table=inbox) do=kill, killed by the fault; pid N) output:",
		"service consumer (started at " + failing + ":8:5, still running when the scenario ended; pid N) output:",
	} {
		prefix, _, _ := strings.Cut(want, " (")
		if got := lineOf(out, want); got != want {
			t.Errorf("want the line\n\t%s\ngot\n\t%s\nin:\n%s", want, lineOf(out, prefix), out)
		}
	}
	// In start order, each with its output under it.
	hidden := pids.ReplaceAllString(out, "pid N")
	i := strings.Index(hidden, "service relay (started at")
	j := strings.Index(hidden, "service consumer (started at "+failing+":6:5")
	k := strings.Index(hidden, "service consumer (started at "+failing+":8:5")
	if i < 0 || !(i < j && j < k) {
		t.Errorf("the three processes out of start order (%d, %d, %d):\n%s", i, j, k, out)
	}
	if !strings.Contains(hidden[j:k], "| reference consumer ready") || !strings.Contains(hidden[k:], "duplicate acked=true") {
		t.Errorf("each process's own output under its label:\n%s", out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenarios []struct {
			Services []struct {
				Service, Start, Fault, Ended, Output string
				PID                                  int
			}
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Scenarios) != 1 {
		t.Fatalf("JSON report: %v\n%s", err, b)
	}
	svcs := doc.Scenarios[0].Services
	var got []string
	for _, s := range svcs {
		got = append(got, fmt.Sprintf("%s %s [%s] %s pid>0=%v", s.Service, strings.TrimPrefix(s.Start, failing), s.Fault, s.Ended, s.PID > 0))
	}
	want := []string{
		"relay :5:5 [] stopped by the stop step at " + failing + ":9:5 pid>0=true",
		"consumer :6:5 [consumer_db.commit(table=inbox) do=kill] killed by the fault pid>0=true",
		"consumer :8:5 [] still running when the scenario ended pid>0=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("JSON services:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(svcs) == 3 && !strings.Contains(svcs[2].Output, "duplicate acked=true") {
		t.Errorf("JSON: the last consumer's output %q", svcs[2].Output)
	}

	passing := scenarioFile(t, "passing.yaml", "name: all as expected\n"+steps+"  - expect: {inbox.rows: 1, stream.pending: 0, within: 5s}\n")
	code, out, _ = cli(t, "run", passing)
	if code != exitOK || strings.Contains(out, "service relay (") {
		t.Errorf("a passing scenario without -v: exit %d, want 0 and no service output:\n%s", code, out)
	}
	code, out, _ = cli(t, "run", "-v", passing)
	if want := "service consumer (started at " + passing + ":6:5, fault consumer_db.commit(table=inbox) do=kill, killed by the fault; pid N) output:"; code != exitOK || lineOf(out, want) != want {
		t.Errorf("a passing scenario with -v: exit %d, want 0 with\n\t%s\nin:\n%s", code, want, out)
	}
}

// A delay still holding its reply when the scenario ends is reported as
// holding, not as a fault that never fired.
func TestDelayStillHolding(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	sys, err := filepath.Abs("../../examples/reference/system.yaml")
	if err != nil {
		t.Fatal(err)
	}
	holding := scenarioFile(t, "holding.yaml", `name: a delay past the scenario's end
system: `+sys+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: {service: consumer, fault: {on: "consumer_db.commit(table=inbox)", do: delay(30s)}}
  - expect: {inbox.rows: 1, stream.pending: 1, within: 5s}
  - sleep(for=200ms)
`)
	code, out, _ := cli(t, "run", holding)
	want := holding + ":6:5: fault: the fault consumer_db.commit(table=inbox) nth=1 do=delay(30s) on consumer struck and was still holding the reply when the scenario ended (wait past its 30s with expect's within:, or use a shorter delay)"
	if code != exitFailed || lineOf(out, "FAIL "+holding+":6:5") != "FAIL "+want || strings.Contains(out, "never fired") {
		t.Errorf("exit %d, want 1 with\n\tFAIL %s\nin:\n%s", code, want, out)
	}
}

// An XADD without the field the system file's stream.event_id names is
// reported as such, not as the consumer's acked_without_effect on an event
// id "" that a history read through the wrong field would show.
func TestXADDWithoutTheMappedField(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	sql, err := filepath.Abs("../../sql")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sysFile := filepath.Join(dir, "system.yaml")
	if err := os.WriteFile(sysFile, []byte(`services:
  relay:    {run: ["${runner}", reference, relay], env: {DATABASE_URL: "${producer_db.url}", REDIS_URL: "${broker.url}", STREAM: "${stream}"}, ready: {log: "ready"}}
  consumer: {run: ["${runner}", reference, consumer], env: {DATABASE_URL: "${consumer_db.url}", REDIS_URL: "${broker.url}", STREAM: "${stream}", GROUP: "${consumer}"}, ready: {log: "ready"}}
schema: {producer: `+sql+`/producer.sql, consumer: `+sql+`/consumer.sql}
produce: "INSERT INTO outbox (event_id, payload) VALUES (${event}, ${payload}::jsonb)"
outbox: {table: outbox, event_id: event_id, payload: payload, unpublished: "NOT published"}
stream: {event_id: messageId, payload: payload}
inbox: {table: inbox, consumer: consumer_id, event_id: event_id, payload: payload}
projection: "SELECT consumer_id, currency, amount, events FROM projection"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := scenarioFile(t, "fields.yaml", `name: the relay writes event_id, the system file says messageId
system: `+sysFile+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: consumer
  - expect: {inbox.rows: 1, within: 5s}
`)
	code, out, _ := cli(t, "run", sc)
	want := `stream: service relay: XADD carried no field "messageId" (the system file's stream.event_id, at ` + sysFile + `:7:20); its fields: event_id, payload`
	_, got, _ := strings.Cut(lineOf(out, "FAIL "+sc+":1:"), ": ")
	// Said as not judged, never as a violation (acked_without_effect: …).
	if code != exitFailed || got != want || strings.Contains(out, "acked_without_effect: ") || !strings.Contains(out, "not judged: acked_without_effect, ") {
		t.Errorf("exit %d, want 1 with\n\t%s\nand no acked_without_effect, in:\n%s", code, want, out)
	}
}

// onReferenceSchemas writes, in dir, a system file of services (the
// services: map's body, two-space indented) on the reference schemas in
// sql/, mapped as the reference pipeline's tables are.
func onReferenceSchemas(t *testing.T, dir, services string) string {
	t.Helper()
	sqlDir, err := filepath.Abs("../../sql")
	if err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(dir, "system.yaml")
	if err := os.WriteFile(sys, []byte("services:\n"+services+`schema: {producer: `+sqlDir+`/producer.sql, consumer: `+sqlDir+`/consumer.sql}
produce: "INSERT INTO outbox (event_id, payload) VALUES (${event}, ${payload}::jsonb)"
outbox:     {table: outbox, event_id: event_id, payload: payload, unpublished: "NOT published"}
stream:     {event_id: event_id, payload: payload}
inbox:      {table: inbox, consumer: consumer_id, event_id: event_id, payload: payload}
projection: "SELECT consumer_id, currency, amount, events FROM projection"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return sys
}

// stop is SIGTERM, then SIGKILL after the grace: a service that ignores
// SIGTERM (a slow drain) is stopped so, and the scenario goes on.
func TestStopKillsAfterTheGraceAndGoesOn(t *testing.T) {
	t.Parallel()
	sys := onReferenceSchemas(t, t.TempDir(), "  relay: {run: [sh, -c, \"trap 'echo ignoring TERM' TERM; echo ready; while :; do sleep 0.05; done\"], ready: {log: ready}}\n")
	sc := scenarioFile(t, "stop.yaml", "name: stop a service that ignores SIGTERM\nsystem: "+sys+"\nsteps:\n  - start: relay\n  - stop: relay\n  - produce\n  - expect: {outbox.rows: 1}\n")
	code, out, _ := cli(t, "run", "-v", sc)
	if code != exitOK || !strings.Contains(out, "relay did not exit within 5s of SIGTERM: SIGKILLed") || !strings.Contains(out, "ok outbox.rows: 1") {
		t.Errorf("exit %d, want 0 with the SIGKILL said and the steps after it run:\n%s", code, out)
	}
}

// A consumer blocked on a lock another service holds is stuck, and its
// witness says on what, from the server: its INSERT waiting on the
// relation's lock, and whose connection blocks it.
func TestStuckWitnessNamesTheBlocker(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
		if len(found) == 0 {
			t.Skip("no psql to hold the lock")
		}
		psql = found[0]
	}
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	ref, err := filepath.Abs("../../examples/reference")
	if err != nil {
		t.Fatal(err)
	}
	// The reference system, with a service that holds a SHARE lock on the
	// inbox (psql in a transaction, asleep).
	refSys := mustRead(t, filepath.Join(ref, "system.yaml"))
	consumerLine := refSys[strings.Index(refSys, "  consumer:"):]
	consumerLine = consumerLine[:strings.IndexByte(consumerLine, '\n')+1]
	locker := strings.ReplaceAll(`  locker:   {run: [PSQL, "${consumer_db.url}", -c, BEGIN, -c, LOCK TABLE inbox IN SHARE MODE, -c, '\! echo locked', -c, SELECT pg_sleep(600)], ready: {log: locked}}
`, "PSQL", psql)
	sys := scenarioFile(t, "system.yaml", strings.NewReplacer(consumerLine, consumerLine+locker, "../../sql/", filepath.Join(ref, "../../sql")+"/").Replace(refSys))
	sc := scenarioFile(t, "locked.yaml", `name: a consumer blocked on a lock another service holds
system: `+sys+`
settle: 2s
steps:
  - produce(event=ev-1)
  - start: relay
  - expect: {outbox.unpublished: 0, within: 10s}
  - start: locker
  - start: consumer
`)
	code, out, _ := cli(t, "run", "-v", sc)
	for _, want := range []string{"stuck: consumer accounting, event ev-1", "consumer_db: 1 connection(s) open: one in ", ", waiting on Lock:relation, blocked by service locker's connection (active for "} {
		if code != exitFailed || !strings.Contains(out, want) {
			t.Errorf("exit %d, want 1 with %q in:\n%s", code, want, out)
			break
		}
	}
}
