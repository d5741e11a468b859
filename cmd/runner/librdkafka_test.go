package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// A relay on librdkafka that marks a row published before its delivery
// report, the record held in the client for its 2 s linger: fault-free,
// nothing is lost, and the runner must not judge while the record is still
// in the client (a row marked that no proxy saw published, the relay
// running) nor while the running consumer has not applied it. Judged at
// the first quiet moment, as before, the event was called lost. A wrong
// expectation on the same run still fails, naming what differed.
func TestMarkedBeforeTheDeliveryReportIsWaitedFor(t *testing.T) {
	t.Parallel()
	needNode(t, "pg", "kafkajs")
	if err := exec.Command("/usr/bin/python3", "-c", "import psycopg2, confluent_kafka").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must install the Python Kafka example's modules (apt-get install python3-psycopg2 python3-confluent-kafka)")
		}
		t.Skip("/usr/bin/python3 lacks psycopg2 or confluent_kafka: apt-get install python3-psycopg2 python3-confluent-kafka")
	}
	const sys, sc = "../../examples/python/system-kafka.yaml", "../../examples/python/kafka-scenarios/marked-before-delivered.yaml"
	wrong := scenarioFile(t, "wrong.yaml", strings.Replace(mustRead(t, sc), `name: "`, `name: "wrong: `, 1)+
		"  - expect: {inbox.rows: 2, within: 5s}\n")
	code, out, errOut := cli(t, "run", "-v", "--broker", "kafka", "--kafka", testservers.URL(t, "kafka"), "--system", sys, sc, wrong)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the wrong expectation):\n%s\n%s", code, out, errOut)
	}
	pass := block(out, "--- PASS: python on librdkafka")
	for _, want := range []string{"| delivered bus-1 at 0/0", "| applied bus-1 (0/0)", "history: no violation (acked_without_effect, double_applied, double_published, lost, phantom, projection_mismatch, stuck)"} {
		if !strings.Contains(pass, want) {
			t.Errorf("the correct run: want %q in:\n%s", want, pass)
		}
	}
	if fail := block(out, "--- FAIL: wrong: "); !strings.Contains(fail, "inbox.rows:\n        want 2, got 1") || strings.Contains(fail, "lost: ") {
		t.Errorf("the wrong expectation: want it to fail on inbox.rows alone:\n%s", fail)
	}
}
