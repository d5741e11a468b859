package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/internal/testservers"
)

// exploreWorkload is two payments through the Go payments example: the
// relay drains the outbox, then the consumer starts.
func exploreWorkload(t *testing.T) string {
	t.Helper()
	sys, err := filepath.Abs("../../examples/go-payments/system.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return scenarioFile(t, "workload.yaml", `name: two payments
system: `+sys+`
steps:
  - produce: {event: pay-1, amount: 100}
  - produce: {event: pay-2, amount: 50}
  - start: relay
  - expect: {outbox.unpublished: 0, within: 10s}
  - start: consumer
`)
}

// explore narrowed to the consumer's COMMIT with an error: the window the
// ack-first mistake loses an event in (a lean run: the whole exploration
// is what `runner explore` without --only does). A runner process, env
// (PAYMENTS_BIN, BUG) in its environment.
func exploreCommits(t *testing.T, env []string, wl, out string) (int, string, string) {
	t.Helper()
	return cliEnv(t, env, "explore", wl, "--out", out, "--actions", "error", "--only", `^consumer consumer_db\.commit`, "--confirm", "1", "--parallel", "2")
}

func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestExploreFindsAPlantedBugAndWritesAScenarioThatFails(t *testing.T) {
	t.Parallel()
	payments := "PAYMENTS_BIN=" + paymentsService(t)
	wl := exploreWorkload(t)

	t.Run("BUG=ack-first", func(t *testing.T) {
		t.Parallel()
		env := []string{payments, "BUG=ack-first"}
		out := t.TempDir()
		// A progress line a second instead of a minute: the points' run
		// shows its progress on stderr, and its end.
		code, stdout, stderr := exploreCommits(t, append(env, progress.EnvEvery+"=1s"), wl, out)
		if code != exitFailed {
			t.Fatalf("BUG=ack-first: exit %d, want 1\n%s\n%s", code, stdout, stderr)
		}
		checkProgress(t, stderr, "points", 1)
		for _, want := range []string{"consumer_db.commit(table=account_balances,processed_messages)", "acked_without_effect, lost", "reproduces 1/1", "2 → 1 event(s)"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("the report lacks %q:\n%s", want, stdout)
			}
		}
		files := yamlFiles(t, out)
		if len(files) != 1 {
			t.Fatalf("wrote %v, want one scenario\n%s", files, stdout)
		}
		body, _ := os.ReadFile(files[0])
		for _, want := range []string{"system: ", `fault: {on: "consumer_db.commit(table=processed_messages)", do: error, optional: true}`, "restart: true"} {
			if !strings.Contains(string(body), want) {
				t.Errorf("the written scenario lacks %q:\n%s", want, body)
			}
		}
		// Runnable as is, and failing while the bug is there.
		code, stdout, stderr = cliEnv(t, env, "run", files[0])
		if code != exitFailed || !strings.Contains(stdout, "acked_without_effect") {
			t.Fatalf("runner run %s: exit %d, want 1 naming acked_without_effect\n%s\n%s\n%s", files[0], code, body, stdout, stderr)
		}
		// And passing once it is fixed ("fails until the bug is fixed").
		if code, stdout, stderr = cliEnv(t, []string{payments, "BUG="}, "run", files[0]); code != exitOK {
			t.Errorf("runner run %s on the fixed consumer: exit %d, want 0\n%s\n%s", files[0], code, stdout, stderr)
		}
	})

	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		code, stdout, stderr := exploreCommits(t, []string{payments, "BUG="}, wl, out)
		if code != exitOK || !strings.Contains(stdout, "no violation") {
			t.Fatalf("the correct consumer: exit %d, want 0\n%s\n%s", code, stdout, stderr)
		}
		if files := yamlFiles(t, out); len(files) != 0 {
			t.Errorf("the correct consumer: wrote %v, want nothing", files)
		}
	})
}

// checkProgress checks that stderr holds progress lines of noun, the last
// one (done) with every unit done and at least bad violations.
func checkProgress(t *testing.T, stderr, noun string, bad int) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^progress: (\d+)/(\d+) ` + noun + `, (\d+) violation\(s\), \S+ elapsed(, about \S+ left|, estimating what remains)?( \(done\))?$`)
	lines := re.FindAllStringSubmatch(stderr, -1)
	if len(lines) < 2 {
		t.Fatalf("want progress lines of %s on stderr (%s=1s), got:\n%s", noun, progress.EnvEvery, stderr)
	}
	last := lines[len(lines)-1]
	n, _ := strconv.Atoi(last[3])
	if last[5] == "" || last[1] != last[2] || n < bad {
		t.Errorf("the last progress line %q: want all %s done, at least %d violation(s), (done)", last[0], noun, bad)
	}
}

func TestExploreRefusesBadInput(t *testing.T) {
	wl := scenarioFile(t, "faulty.yaml", `name: a faulty workload
system: `+mustAbs(t, "../../examples/go-payments/system.yaml")+`
steps:
  - produce: {event: pay-1}
  - start: {service: relay, fault: {on: "broker.reply(XADD)", do: kill}}
`)
	code, _, stderr := cli(t, "explore", wl, "--out", t.TempDir())
	if code != exitInvalid || !strings.Contains(stderr, "faulty.yaml:5:5: start: the workload arms no fault") {
		t.Errorf("a workload with a fault: exit %d, want 2 naming its line\n%s", code, stderr)
	}
	code, _, stderr = cli(t, "explore", wl, "--out", t.TempDir(), "--actions", "kil")
	if code != exitInvalid || !strings.Contains(stderr, `did you mean "kill"?`) {
		t.Errorf("--actions kil: exit %d, want 2 with a suggestion\n%s", code, stderr)
	}
	code, _, stderr = cli(t, "explore", wl)
	if code != exitInvalid || !strings.Contains(stderr, "--out DIR is required") {
		t.Errorf("no --out: exit %d, want 2\n%s", code, stderr)
	}
	code, _, stderr = cli(t, "explore", wl, "--out", t.TempDir(), "--events", "10", "--seed", "3")
	if code != exitInvalid || !strings.Contains(stderr, "--events, --seed drive(s) the random mode: add --random") {
		t.Errorf("--events without --random: exit %d, want 2 saying it needs --random\n%s", code, stderr)
	}
	// The workload is read as every file is: a FIFO hung explore past
	// every signal, /dev/zero ran it out of memory.
	fifo := filepath.Join(t.TempDir(), "w.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fifo, "/dev/zero"} {
		code, _, stderr = cli(t, "explore", f, "--out", t.TempDir())
		if code != exitInvalid || !strings.Contains(stderr, f+" is not a regular file") {
			t.Errorf("explore %s: exit %d, want 2\n%s", f, code, stderr)
		}
	}
}

// On NATS the boundary map has the broker's side too — the relay's
// JetStream publishes (PubAck), the consumer's pull requests, deliveries
// and acks (ackAck: answered) — and the points there strike: the Node
// consumer killed with its first ack held, or before it reaches the
// server, gets the message again after its AckWait, finds it in its inbox
// and acks it: held.
func TestExploreNodeNATSMapsAndStrikesBrokerBoundaries(t *testing.T) {
	t.Parallel()
	needNode(t, "nats")
	jsonReport := filepath.Join(t.TempDir(), "explore.json")
	code, out, errOut := cli(t, "explore", "-v", "--broker", "nats", "--nats", testservers.URL(t, "nats"),
		"--system", "../../examples/node/system-nats.yaml", "--out", t.TempDir(), "--json", jsonReport,
		"--actions", "kill", "--only", `^consumer broker\.(request|reply)\(ack\) nth=1 `, "--parallel", "2", "--budget", "2m",
		// A killed consumer comes back after Node's start (seconds on a
		// cold, loaded machine) and gets the message after its 2 s AckWait:
		// the default 5 s to settle left one CI run "not judged".
		"--settle", "20s")
	if code != exitOK {
		t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	// The built-in workload's 5 outbox rows are the relay's publishes; its
	// 2 raw re-sends (a duplicate, a conflicting copy) are delivered too,
	// one message a pull, each acked once (the consumer's inbox absorbs both).
	for _, want := range []string{
		"broker.publish→ok                                          ×5",
		"broker.reply(deliver)→entries                              ×7",
		"broker.ack→ok                                              ×7",
		"one pass: broker.request(deliver) → broker.reply(deliver)→entries → consumer_db.statement(table=inbox) → consumer_db.statement(table=projection) → consumer_db.commit(table=inbox,projection) → broker.ack→ok",
		"consumer broker.request(ack) nth=1 do=kill: held",
		"consumer broker.reply(ack) nth=1 do=kill: held",
		"explored 2 point(s)", "0 never reached",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if report := mustRead(t, jsonReport); !strings.Contains(report, `"on": "broker.request(publish)"`) || !strings.Contains(report, `"on": "broker.reply(deliver)"`) {
		t.Errorf("the JSON report lacks the relay's publish points or the consumer's delivery points:\n%s", report)
	}
}

// An interrupted explore counts every point it did not finish "not
// explored": its summary never claims points it did not run.
func TestAnInterruptedExploreSaysWhatItDidNotExplore(t *testing.T) {
	t.Parallel()
	bin := runnerBin(t)
	pg, rd := testservers.URLs(t)
	cmd := exec.Command(bin, "explore", "-v", exploreWorkload(t), "--out", t.TempDir(), "--actions", "error", "--confirm", "0", "--parallel", "2")
	cmd.Env = append(os.Environ(), "RUNNER_PG_URL="+pg, "RUNNER_REDIS_URL="+rd, "RUNNER_BIN="+bin, "PAYMENTS_BIN="+paymentsService(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	signalled := false
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if !signalled && strings.HasPrefix(strings.TrimSpace(sc.Text()), "[1/") {
			_ = cmd.Process.Signal(os.Interrupt) // the first point is done, the others are not
			signalled = true
		}
	}
	_ = cmd.Wait()
	m := regexp.MustCompile(`points: (\d+) to run`).FindStringSubmatch(out.String())
	s := regexp.MustCompile(`explored (\d+) point\(s\) in .*: (\d+) held, (\d+) violation\(s\), (\d+) unclassifiable, (\d+) never reached, (\d+) not judged, (\d+) not explored`).FindStringSubmatch(out.String())
	if !signalled || m == nil || s == nil {
		t.Fatalf("no point finished, or no summary:\n%s", out.String())
	}
	n := func(s string) int { v, _ := strconv.Atoi(s); return v }
	sum := 0
	for _, c := range s[2:8] {
		sum += n(c)
	}
	if sum != n(m[1]) || n(s[7]) == 0 || n(s[1]) != n(m[1])-n(s[7]) {
		t.Errorf("the summary's counts do not add up to the %s points, or claim them all:\n%s", m[1], out.String())
	}
}

// explore on a broker the system's services do not speak skips, as run
// does: exit 0, saying why, nothing explored (it exited 1, as a violation).
func TestExploreOnABrokerTheSystemDoesNotSpeakSkips(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, "explore", "--broker", "nats", "--system", "../../examples/node/system.yaml", "--out", t.TempDir())
	if code != exitOK || !strings.Contains(out, "explore skipped: the system file ") || !strings.Contains(out, "supports brokers redis; this run is nats: nothing was explored") {
		t.Errorf("exit %d, want 0 and the skip:\n%s\n%s", code, out, errOut)
	}
}

// explore checks the system file as `runner run` does before it starts
// anything: a ${…} the broker cannot give is said at its line and column,
// exit 2, and no service ever ran (each would leave a file behind).
func TestExploreValidatesTheSystemFileBeforeStartingAnything(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, sql := range []string{"producer.sql", "consumer.sql"} {
		b, err := os.ReadFile("../../examples/go-payments/" + sql)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, sql), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	started := filepath.Join(dir, "started")
	sys := scenarioFile(t, "system.yaml", `services:
  relay:    {run: [sh, -c, "touch `+started+`; sleep 60"], env: {DATABASE_URL: "${producer_db.url}", SUBJECT: "${subject}"}}
  consumer: {run: [sh, -c, "touch `+started+`; sleep 60"], env: {DATABASE_URL: "${consumer_db.url}"}}
schema: {producer: `+filepath.Join(dir, "producer.sql")+`, consumer: `+filepath.Join(dir, "consumer.sql")+`}
produce: "INSERT INTO payment_outbox (message_id, body) VALUES (${event}, ${payload}::jsonb)"
outbox:     {table: payment_outbox, event_id: message_id, payload: body, unpublished: "sent_at IS NULL"}
stream:     {event_id: messageId, payload: body}
inbox:      {table: processed_messages, consumer: subscriber, event_id: message_id, payload: body}
`)
	code, stdout, stderr := cli(t, "explore", "--system", sys, "--out", t.TempDir())
	if code != exitInvalid || !strings.Contains(stderr, "system.yaml:2:") || !strings.Contains(stderr, "${subject} means nothing on redis") {
		t.Errorf("exit %d, want 2 naming the system file's line\n%s\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(started); !os.IsNotExist(err) {
		t.Errorf("a service started before the system file was checked (%v)", err)
	}
}

// A scenario pinned to a broker (broker:) is skipped, saying why, on a
// broker the run names; without --broker it runs on its own.
func TestAPinnedScenarioRunsOnItsBroker(t *testing.T) {
	t.Parallel()
	file := scenarioFile(t, "pinned.yaml", "name: pinned\nbroker: nats\nsteps:\n  - produce(event=e1)\n")
	code, stdout, stderr := cli(t, "run", "--broker", "redis", file)
	if code != exitOK || !strings.Contains(stdout, "pinned.yaml:2:9: pinned to nats (broker: nats), not run on redis") {
		t.Errorf("--broker redis: exit %d, want 0 and the skip\n%s\n%s", code, stdout, stderr)
	}
}
