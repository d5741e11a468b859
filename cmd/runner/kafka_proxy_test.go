package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// The Node Kafka example drilled through the Kafka proxy, the history
// judged from the wire: a relay killed at broker.reply(publish) publishes
// again on restart (at least once, no double_published) and the correct
// consumer passes; the commit-first consumer with a refused inbox COMMIT
// is judged lost, which passes declared and fails undeclared, naming it.
func TestNodeKafkaThroughProxy(t *testing.T) {
	t.Parallel()
	needNode(t, "kafkajs")
	sys := func(name string) string { return "system: " + mustAbs(t, "../../examples/node/"+name) + "\n" }
	relay := scenarioFile(t, "relay.yaml", sys("system-kafka.yaml")+mustRead(t, "../../examples/node/kafka-scenarios/relay-killed-at-publish.yaml"))
	first := mustRead(t, "../../examples/node/kafka-scenarios/commit-first-loses-the-event.yaml")
	declared := scenarioFile(t, "declared.yaml", sys("system-kafka-commit-first.yaml")+
		strings.Replace(strings.Replace(first, "tags:", "expect_violations: [lost, acked_without_effect]\ntags:", 1), "name: \"", "name: \"declared: ", 1))
	undeclared := scenarioFile(t, "undeclared.yaml", sys("system-kafka-commit-first.yaml")+strings.Replace(first, "name: \"", "name: \"undeclared: ", 1))
	code, out, errOut := cli(t, "run", "-v", "--parallel", "3", "--broker", "kafka", "--kafka", testservers.URL(t, "kafka"), relay, declared, undeclared)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the undeclared lost):\n%s\n%s", code, out, errOut)
	}
	for head, wants := range map[string][]string{
		"--- PASS: your Kafka relay killed": {"ok stream.entries: 2", "ok inbox.rows: 1", "history: no violation (acked_without_effect, double_applied, double_published, lost,",
			"history: not judged: stranded: on kafka: a Kafka consumer group holds no record for a worker"},
		"--- PASS: declared: anti-pattern":   {"lost", "acked_without_effect"},
		"--- FAIL: undeclared: anti-pattern": {"lost: consumer accounting, event bus-1: committed and every entry of it the broker holds (1) was acked, yet it was never applied", "Produce: published entry 0/0", "Fetch: delivered entry 0/0 by accounting, acked"},
	} {
		b := block(out, head)
		for _, want := range wants {
			if !strings.Contains(b, want) {
				t.Errorf("%s: want %q in:\n%s", head, want, b)
			}
		}
	}
	if strings.Contains(out, "no publish/ack history without a broker proxy") {
		t.Errorf("a verdict still says kafka has no broker proxy:\n%s", out)
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
