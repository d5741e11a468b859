package main

import (
	"os"
	"strings"
	"testing"
)

// A finding explore writes on Kafka is a CI test as it stands: the file
// names its broker and its settle, so `runner run FILE` with nothing else
// on the command line (no --broker: a run's default is redis; no
// --settle) runs it as explore did — failing on the commit-first consumer
// that lost the event, passing on the correct one. The workload is one
// event and the point one (the consumer's refused COMMIT): explore goes
// only as far as writing its file.
func TestExploreKafkaFindingRunsAsWritten(t *testing.T) {
	t.Parallel()
	needNode(t, "kafkajs")
	wl := scenarioFile(t, "workload.yaml", `name: one event on Kafka
system: `+mustAbs(t, "../../examples/node/system-kafka.yaml")+`
steps:
  - produce: {event: ev-1, amount: 100}
  - start: relay
  - expect: {outbox.unpublished: 0, within: 10s}
  - start: consumer
`)
	out := t.TempDir()
	buggy, correct := []string{"BUG=commit-first"}, []string{"BUG="}
	code, stdout, stderr := cliEnv(t, buggy, "explore", wl, "--broker", "kafka", "--out", out, "--actions", "error",
		"--only", `^consumer consumer_db\.commit\(table=inbox\) nth=1 `, "--confirm", "1", "--settle", "6s")
	if code != exitFailed || !strings.Contains(stdout, "lost") {
		t.Fatalf("explore on the commit-first consumer: exit %d, want 1 naming lost\n%s\n%s", code, stdout, stderr)
	}
	files := yamlFiles(t, out)
	if len(files) != 1 {
		t.Fatalf("wrote %v, want one finding\n%s", files, stdout)
	}
	body, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"broker: kafka", "settle: 6s", "# It fails until the bug is fixed: runner run "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the file lacks %q:\n%s", want, body)
		}
	}
	if code, stdout, stderr = cliEnv(t, buggy, "run", files[0]); code != exitFailed || !strings.Contains(stdout, "lost") {
		t.Errorf("runner run FILE on the commit-first consumer: exit %d, want 1 naming lost\n%s\n%s\n%s", code, body, stdout, stderr)
	}
	if code, stdout, stderr = cliEnv(t, correct, "run", files[0]); code != exitOK {
		t.Errorf("runner run FILE on the correct consumer: exit %d, want 0\n%s\n%s\n%s", code, body, stdout, stderr)
	}
}
