package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// A consumer that stops making progress fails on every broker, whatever
// safe state it stopped in: each build of the Node team's consumer, its
// database connection cut at its first inbox COMMIT. The correct build dies
// of it, is started again by its supervisor and applies both events; the
// no-reconnect build logs the broken connection and fails every try of
// bus-2 for ever while its process runs: stuck, with the consumer's last
// lines as witness. Nothing else is named: bus-1 committed before the cut.
func TestNodeStuckOnEveryBroker(t *testing.T) {
	t.Parallel()
	needNode(t, "pg", "ioredis", "kafkajs", "nats", "amqplib")
	const correct = "../../examples/node/every-broker/consumer-db-cut.yaml"
	src := mustRead(t, correct)
	sys, err := absPath("../../examples/node/system-every-broker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	stuck := strings.Replace(src, "start: {service: consumer, restart: true,", "start: {service: consumer, restart: true, env: {BUG: no-reconnect},", 1)
	stuck = strings.Replace(strings.Replace(stuck, "system: ../system-every-broker.yaml", "system: "+sys, 1), `name: "`, `name: "no-reconnect: `, 1)
	if !strings.Contains(stuck, "BUG: no-reconnect") || !strings.Contains(stuck, "system: "+sys) {
		t.Fatalf("%s: its consumer start or system: line is not where this test rewrites them", correct)
	}
	args := []string{"run", "-v", "--parallel", "8", "--broker", "all"}
	for _, b := range []string{"nats", "rabbitmq", "kafka"} {
		args = append(args, "--"+b, testservers.URL(t, b))
	}
	code, out, errOut := cli(t, append(args, correct, scenarioFile(t, "no-reconnect.yaml", stuck))...)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the no-reconnect builds):\n%s\n%s", code, out, errOut)
	}
	for _, label := range []string{"redis", "kafka (kfake)", "nats", "rabbitmq"} {
		pass, fail := result(out, "PASS: your consumer's database connection is cut", label), result(out, "FAIL: no-reconnect: ", label)
		// Redis judges stranded too; the other brokers say why they cannot.
		if !strings.Contains(pass, "history: no violation (acked_without_effect, double_applied, double_published, lost, phantom, projection_mismatch, ") || !strings.Contains(pass, ", stuck)\n") {
			t.Errorf("%s: the correct build did not pass with progress judged:\n%s", label, cmpOr(pass, result(out, "FAIL: your consumer's database connection is cut", label), out))
		}
		for _, want := range []string{"stuck: consumer accounting, event bus-2: committed and published, never applied, although a consumer of accounting ran for the whole settle",
			"its last lines: ", "Client has encountered a connection error", "system: stood still at the "} {
			if !strings.Contains(fail, want) {
				t.Errorf("%s: the no-reconnect build: want %q in:\n%s", label, want, fail)
			}
		}
		if names := namedInvariants(fail); len(names) != 1 {
			t.Errorf("%s: the no-reconnect build: want stuck alone, the checker named %v:\n%s", label, names, fail)
		}
	}
}

// result is the block of the result whose status line starts with head
// and names the broker label ("--- PASS: name [label] (…)").
func result(out, head, label string) string {
	for _, b := range strings.Split(out, "--- ")[1:] {
		if strings.HasPrefix(b, head) && strings.Contains(b, " ["+label+"] ") {
			return b
		}
	}
	return ""
}

func absPath(p string) (string, error) { return filepath.Abs(p) }

// cmpOr is the first non-empty string.
func cmpOr(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}
