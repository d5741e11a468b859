package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testservers"
)

// figureRow is one example on one broker with one planted bug: the
// system file, the bug (BUG in the runner's environment, as its services
// read it) and the points explore tries there (--only, --actions), enough
// to find the bug and few enough to keep the whole table within minutes.
type figureRow struct {
	example, broker, system, bug, only, actions string
	needs                                       func(t *testing.T)
}

const commits = `^consumer consumer_db\.commit`

var figureRows = []figureRow{
	{"Go payments", "redis", "go-payments/system.yaml", "ack-first", commits, "error,kill", nil},
	{"Go payments", "redis", "go-payments/system.yaml", "mark-first", `^relay producer_db\.commit`, "kill", nil},
	{"Python", "redis", "python/system.yaml", "ack-first", commits, "error", needPython},
	{"Python", "redis", "python/system.yaml", "cursor", `^NO POINT$`, "kill", needPython}, // the fault-free run fails
	{"Python relay, Node consumer", "kafka", "python/system-kafka.yaml", "commit-first", commits, "error", needPythonKafka},
	{"Node", "redis", "node/system.yaml", "ack-first", commits, "error", needNodeOn("ioredis")},
	{"Node", "nats", "node/system-nats.yaml", "ack-first", commits, "error", needNodeOn("nats")},
	{"Node", "rabbitmq", "node/system-rabbitmq.yaml", "ack-first", commits, "error", needNodeOn("amqplib")},
	{"Node", "kafka", "node/system-kafka.yaml", "commit-first", commits, "error", needNodeOn("kafkajs")},
}

// figure is what one row came to: the files explore wrote on the buggy
// build and how many of them are CI tests as written (`runner run FILE`
// fails on the buggy build, passes on the correct one), and the files it
// wrote on the correct build (each a false finding).
type figure struct {
	row                   figureRow
	written, ready, wrong int
	notes                 []string
	took                  time.Duration
}

// The figures of docs/explore.md ("Files written, CI-ready"): explore on
// each example and broker, its BUG= build and its correct build, and every
// file it wrote run with `runner run FILE` and nothing else on the command
// line (the servers come from the environment, as in CI). Slow (minutes):
// OUTBOXDRILL_EXPLORE_FIGURES=1 go test ./cmd/runner -run ExploreFigures -v
func TestExploreFigures(t *testing.T) {
	if os.Getenv("OUTBOXDRILL_EXPLORE_FIGURES") != "1" {
		t.Skip("minutes of explore on every example: OUTBOXDRILL_EXPLORE_FIGURES=1 to run it")
	}
	payments := "PAYMENTS_BIN=" + paymentsService(t)
	var mu sync.Mutex
	var out []figure
	slots := make(chan struct{}, 2) // two explorations at once, each --parallel 2
	t.Run("rows", func(t *testing.T) {
		for _, r := range figureRows {
			t.Run(r.example+"/"+r.broker+"/"+r.bug, func(t *testing.T) {
				t.Parallel()
				if r.needs != nil {
					r.needs(t)
				}
				slots <- struct{}{}
				defer func() { <-slots }()
				f := exploreFigure(t, r, append(brokerEnv(t, r.broker), payments))
				mu.Lock()
				out = append(out, f)
				mu.Unlock()
			})
		}
	})
	t.Logf("files written / CI-ready per example and broker:\n%s", figureTable(out))
}

// exploreFigure explores r on its buggy and its correct build and runs
// every file written.
func exploreFigure(t *testing.T, r figureRow, env []string) figure {
	began := time.Now()
	f := figure{row: r}
	sys := mustAbs(t, filepath.Join("../../examples", r.system))
	explore := func(bug string) ([]string, string) {
		out := t.TempDir()
		code, stdout, stderr := cliEnv(t, append(env, "BUG="+bug), "explore", "--system", sys, "--broker", r.broker, "--out", out,
			"--only", r.only, "--actions", r.actions, "--confirm", "1", "--parallel", "2", "--budget", "5m")
		if code != exitOK && code != exitFailed {
			t.Errorf("explore BUG=%s: exit %d\n%s\n%s", bug, code, stdout, stderr)
		}
		return yamlFiles(t, out), stdout
	}
	files, _ := explore(r.bug)
	for _, file := range files {
		f.written++
		failsBuggy, why := runsAs(t, env, r.bug, file, exitFailed)
		passesCorrect, whyNot := runsAs(t, env, "", file, exitOK)
		if failsBuggy && passesCorrect {
			f.ready++
			continue
		}
		f.notes = append(f.notes, filepath.Base(file)+": "+why+whyNot)
		t.Errorf("%s is not a CI test as written: %s%s", file, why, whyNot)
	}
	wrong, stdout := explore("")
	if f.wrong = len(wrong); f.wrong > 0 {
		t.Errorf("explore wrote %d file(s) on the correct build:\n%s", f.wrong, stdout)
	}
	f.took = time.Since(began).Round(time.Second)
	return f
}

// runsAs runs `runner run FILE` with BUG=bug and reports whether it
// exited want; else why, with the file and the run's output.
func runsAs(t *testing.T, env []string, bug, file string, want int) (bool, string) {
	code, stdout, stderr := cliEnv(t, append(env, "BUG="+bug), "run", file)
	if code == want {
		return true, ""
	}
	body, _ := os.ReadFile(file)
	return false, fmt.Sprintf("\nBUG=%s: exit %d, want %d\n%s\n%s\n%s", bug, code, want, body, stdout, stderr)
}

// brokerEnv gives the runner the test servers of broker b (Redis and
// PostgreSQL: cliEnv's own).
func brokerEnv(t *testing.T, b string) []string {
	if b == "redis" {
		return nil
	}
	return []string{"RUNNER_" + strings.ToUpper(b) + "_URL=" + testservers.URL(t, b)}
}

// figureTable is the Markdown table of docs/explore.md, in figureRows'
// order.
func figureTable(fs []figure) string {
	var b strings.Builder
	b.WriteString("| example | broker | BUG= | files written | CI-ready | files on the correct build | time |\n|---|---|---|---|---|---|---|\n")
	for _, r := range figureRows {
		for _, f := range fs {
			if f.row.system == r.system && f.row.bug == r.bug {
				fmt.Fprintf(&b, "| %s | %s | `%s` | %d | %d | %d | %s |\n", r.example, r.broker, r.bug, f.written, f.ready, f.wrong, f.took)
			}
		}
	}
	return b.String()
}

func needPython(t *testing.T) {
	if !pythonReady(t) {
		t.Skip("/usr/bin/python3 lacks psycopg2 or redis")
	}
}

func needPythonKafka(t *testing.T) {
	needNode(t, "kafkajs")
	if err := exec.Command("/usr/bin/python3", "-c", "import psycopg2, confluent_kafka").Run(); err != nil {
		t.Skip("/usr/bin/python3 lacks psycopg2 or confluent_kafka")
	}
}

func needNodeOn(module string) func(t *testing.T) { return func(t *testing.T) { needNode(t, module) } }
