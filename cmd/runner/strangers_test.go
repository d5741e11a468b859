package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An inbox mapping whose consumer column holds something else than the
// consumer group (here: the event id) must not turn every ack into
// acked_without_effect: the verdict says what it could not judge and why.
func TestAnInboxOfStrangersIsNotJudged(t *testing.T) {
	t.Parallel()
	needNode(t, "pg")
	node, err := filepath.Abs("../../examples/node")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(node, "system.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sys := strings.ReplaceAll(string(src), "inbox:      {table: inbox, consumer: consumer_id,", "inbox:      {table: inbox, consumer: event_id,")
	sys = strings.ReplaceAll(sys, "relay.js", filepath.Join(node, "relay.js"))
	sys = strings.ReplaceAll(sys, "consumer.js", filepath.Join(node, "consumer.js"))
	sys = strings.ReplaceAll(sys, "producer.sql", filepath.Join(node, "producer.sql"))
	sys = strings.ReplaceAll(sys, "consumer.sql", filepath.Join(node, "consumer.sql"))
	if !strings.Contains(sys, "consumer: event_id") {
		t.Fatal("the Node system file changed: this test's mapping edit no longer applies")
	}
	sysFile := scenarioFile(t, "system.yaml", sys)
	sc := scenarioFile(t, "strangers.yaml", `name: the inbox mapping names the event id column as the consumer
system: `+sysFile+`
steps:
  - produce(event=bus-1)
  - start: relay
  - start: consumer
  - expect: {stream.pending: 0, within: 10s}
`)
	code, out, errOut := cli(t, "run", "-v", sc)
	if code != exitOK || strings.Contains(out, "FAIL") {
		t.Errorf("exit %d; want a pass (nothing judged on a column that does not hold the group):\n%s\n%s", code, out, errOut)
	}
	for _, inv := range []string{"acked_without_effect", "double_applied", "lost", "phantom", "projection_mismatch", "stranded"} {
		if want := "not judged: " + inv + ": the inbox holds rows for consumer id(s) bus-1, which no consumer group of the run read as"; !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}
