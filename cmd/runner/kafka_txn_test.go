package main

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// A team's relay producing in Kafka transactions (the Node example with
// TXN=1, kafkajs transactionalId), through the Kafka proxy, on the tests'
// kfake, which writes a commit marker after each transaction's record as
// Kafka does: stream.entries and stream.events count the two records, not
// the four offsets, stream.lag of the consumer that committed after each
// record is 0, and settling ends once the system is quiet. A deliberately
// wrong stream.entries (the four offsets) fails, naming both counts.
func TestNodeKafkaTxnRelay(t *testing.T) {
	t.Parallel()
	needNode(t, "kafkajs")
	src := "system: " + mustAbs(t, "../../examples/node/system-kafka-txn.yaml") + "\n" +
		mustRead(t, "../../examples/node/kafka-scenarios/txn-relay-one-entry.yaml")
	right := scenarioFile(t, "right.yaml", src)
	wrong := scenarioFile(t, "wrong.yaml", strings.Replace(src, `name: "`, `name: "wrong: `, 1)+"  - expect: {stream.entries: 4}\n")
	code, out, errOut := cli(t, "run", "-v", "--parallel", "2", "--broker", "kafka", "--kafka", testservers.URL(t, "kafka"), right, wrong)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the wrong stream.entries):\n%s\n%s", code, out, errOut)
	}
	for head, wants := range map[string][]string{
		"--- PASS: your transactional Kafka relay": {"published bus-2 at 0/2", // offset 1 is bus-1's commit marker
			"ok stream.entries: 2", "ok stream.events: 2", "ok stream.lag: {}", "ok inbox.rows: 2", "system: settled in"},
		"--- FAIL: wrong: your transactional Kafka relay": {"wrong.yaml:17:", "stream.entries:", "want 4, got 2"},
	} {
		b := block(out, head)
		for _, want := range wants {
			if !strings.Contains(b, want) {
				t.Errorf("%s: want %q in:\n%s", head, want, b)
			}
		}
	}
}
