package main

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// A Kafka consumer killed holding a fetched record, as the last step: its
// restart gets the partition only once the killed member's session ran
// out (6 s, announced in its JoinGroup). Settling waits past its 5 s
// default for that, saying so, and judges the event applied; stopping at
// 5 s would have called the running consumer stuck.
func TestKafkaSessionTimeoutIsWaitedFor(t *testing.T) {
	t.Parallel()
	needNode(t, "pg", "kafkajs")
	code, out, errOut := cli(t, "run", "-v", "--broker", "kafka", "--kafka", testservers.URL(t, "kafka"),
		"--system", "../../examples/node/system-kafka.yaml", "../../examples/node/kafka-scenarios/consumer-killed-at-fetch.yaml")
	if code != exitOK {
		t.Fatalf("exit %d, want 0:\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"armed broker.reply(deliver) nth=1 do=kill", "| applied bus-1 (0/0)",
		"(limit raised from 5s to ", "'s session timeout (JoinGroup) 6s",
		"history: no violation (acked_without_effect, double_applied, double_published, lost, phantom, projection_mismatch, stuck)"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}
