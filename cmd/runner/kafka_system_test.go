package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/internal/testservers"
)

// A team's Kafka relay and consumer in Node (kafkajs + pg), told only
// ${topic}, ${broker.address}, ${group} and ${consumer}, through the Kafka
// proxy. In one run on Kafka: the correct consumer passes its
// commit-refused window, the group's committed offset read by stream.lag,
// the wire invariants judged; the commit-first consumer loses the event
// (stream.lag 0, no inbox row): its declared lost is found from the wire,
// its undeclared acked_without_effect and a wrong stream.lag fail it.
func TestNodeKafkaExample(t *testing.T) {
	t.Parallel()
	needNode(t, "kafkajs")
	withSystem := func(name, scenario, system string, edit func(string) string) string {
		src, err := os.ReadFile("../../examples/node/kafka-scenarios/" + scenario)
		if err != nil {
			t.Fatal(err)
		}
		sys, err := filepath.Abs("../../examples/node/" + system)
		if err != nil {
			t.Fatal(err)
		}
		return scenarioFile(t, name, edit("system: "+sys+"\n"+string(src)))
	}
	same := func(s string) string { return s }
	correct := withSystem("correct.yaml", "seed-2-consumer-commit-fails.yaml", "system-kafka.yaml", same)
	declared := withSystem("declared.yaml", "commit-first-loses-the-event.yaml", "system-kafka-commit-first.yaml", func(s string) string {
		s = strings.Replace(s, "tags:", "expect_violations: [lost]\ntags:", 1)
		return s + "  - expect: {stream.lag: {accounting: 1}}\n" // deliberately wrong: the group is past the record
	})
	jsonReport := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := cli(t, "run", "-v", "--parallel", "2", "--json", jsonReport, "--broker", "kafka", "--kafka", testservers.URL(t, "kafka"), correct, declared)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the commit-first consumer's undeclared violation, its wrong stream.lag):\n%s\n%s", code, out, errOut)
	}
	pass, fail := block(out, "--- PASS: your Kafka consumer's COMMIT fails"), block(out, "--- FAIL: anti-pattern: a Kafka consumer that commits its offset")
	for _, want := range []string{"ok stream.lag: {}", "ok inbox.rows: 1", "history: no violation (acked_without_effect, double_applied, double_published, lost, phantom, projection_mismatch, stuck)",
		"history: not judged: stranded: on kafka: a Kafka consumer group holds no record", "| applied bus-1 (0/0)"} {
		if !strings.Contains(pass, want) {
			t.Errorf("the correct consumer: want %q in:\n%s", want, pass)
		}
	}
	for _, want := range []string{
		"ok stream.lag: {}", "ok inbox.rows: 0", "| bus-1: rolled back (40001",
		"history (declared): lost: consumer accounting, event bus-1: committed and every entry of it the broker holds (1) was acked",
		"acked_without_effect: consumer accounting, event bus-1: entry 0/0 was acked",
		declared + ":16:14: stream.lag:", "want {accounting: 1}", "(-want +got)\n        - accounting: 1",
	} {
		if !strings.Contains(fail, want) {
			t.Errorf("the commit-first consumer: want %q in:\n%s", want, fail)
		}
	}
	if strings.Contains(out, "no publish/ack history without a broker proxy") {
		t.Errorf("a verdict says kafka has no broker proxy:\n%s", out)
	}
	teamGroupsGone(t, jsonReport)
}

// teamGroupsGone: the consumer groups the team's services joined (their
// ${group}) were deleted with the scenarios' topics, their killed or
// stopped members removed first.
func teamGroupsGone(t *testing.T, jsonReport string) {
	t.Helper()
	var doc struct{ Scenarios []struct{ Stream string } }
	if err := json.Unmarshal([]byte(mustRead(t, jsonReport)), &doc); err != nil || len(doc.Scenarios) == 0 {
		t.Fatalf("JSON report: %v", err)
	}
	seeds, err := kafka.Seeds(testservers.URL(t, "kafka"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	groups, err := kadm.NewClient(cl).ListGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range doc.Scenarios {
		if g := kafka.Sanitize(sc.Stream) + ".accounting"; slices.Contains(groups.Groups(), g) {
			t.Errorf("the team's group %s outlived its scenario", g)
		}
	}
}

// block is the part of a run's output from the line starting with head to
// the next scenario's.
func block(out, head string) string {
	i := strings.Index(out, head)
	if i < 0 {
		return ""
	}
	rest := out[i+len(head):]
	if j := strings.Index(rest, "\n--- "); j >= 0 {
		rest = rest[:j]
	}
	return head + rest
}

// The Kafka example's scenarios load with every Kafka system file, and
// their placeholders mean something on the brokers the files list.
func TestNodeKafkaExampleValid(t *testing.T) {
	files, _ := filepath.Glob("../../examples/node/kafka-scenarios/*.yaml")
	want := fmt.Sprintf("ok: %d scenario(s) valid", len(files))
	for _, sys := range []string{"system-kafka.yaml", "system-kafka-commit-first.yaml", "system-kafka-txn.yaml"} {
		code, out, errOut := cli(t, "validate", "--offline", "--system", "../../examples/node/"+sys, "../../examples/node/kafka-scenarios")
		if code != exitOK || len(files) < 5 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d\n%s\n%s", sys, code, out, errOut)
		}
	}
}

// A placeholder that names nothing on the run's broker stops the run before
// anything starts, exit 2, at the system file's line:col and naming the
// broker; so does a misspelt one, with the closest name.
func TestPlaceholderMeaninglessOnTheRunsBroker(t *testing.T) {
	unlisted := scenarioFile(t, "sys.yaml", strings.Replace(mustRead(t, "../../examples/node/system.yaml"), "brokers:    [redis]", "", 1))
	dir := filepath.Dir(unlisted)
	for _, f := range []string{"producer.sql", "consumer.sql"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(mustRead(t, "../../examples/node/"+f)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sc := "../../examples/node/scenarios/seed-4-new-entry-same-event.yaml"
	code, out, errOut := cli(t, "run", "--broker", "kafka", "--system", unlisted, sc)
	want := unlisted + ":5:115: services: relay: env STREAM: ${stream} means nothing on kafka, only on redis; a service on kafka is told ${topic} and ${group}"
	if code != exitInvalid || !strings.Contains(errOut, want) || strings.Contains(errOut, "started") {
		t.Errorf("${stream} on kafka: exit %d, want 2 with\n\t%s\ngot:\n%s\n%s", code, want, out, errOut)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte(strings.Replace(mustRead(t, unlisted), `STREAM: "${stream}"}, ready`, `STREAM: "${strem}"}, ready`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, "validate", "--offline", "--system", typo, sc)
	if want := typo + `:5:115: services: relay: env STREAM: unknown ${strem} (did you mean "stream"?)`; code != exitInvalid || !strings.Contains(errOut, want) {
		t.Errorf("a misspelt placeholder: exit %d, want 2 with\n\t%s\ngot:\n%s", code, want, errOut)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A team's service on every broker is told where the relay publishes and
// the broker's address, and its scenario runs to a verdict that says what
// it could not judge there.
func TestTeamServiceOnEveryBroker(t *testing.T) {
	t.Parallel()
	schema, err := filepath.Abs("../../examples/node")
	if err != nil {
		t.Fatal(err)
	}
	sys := scenarioFile(t, "system.yaml", `services:
  echo: {run: [sh, -c, 'echo "dest=$DEST addr=$ADDR"; exec sleep 60'], env: {DEST: "${destination}", ADDR: "${broker.address}"}, ready: {log: "dest="}}
schema: {producer: `+schema+`/producer.sql, consumer: `+schema+`/consumer.sql}
produce: "INSERT INTO outbox (event_id, payload) VALUES (${event}, ${payload}::jsonb)"
outbox:     {table: outbox, event_id: event_id, payload: payload, unpublished: "published_at IS NULL"}
stream:     {event_id: event_id, payload: payload}
inbox:      {table: inbox, consumer: consumer_id, event_id: event_id, payload: payload}
projection: "SELECT consumer_id, currency, amount, events FROM projection"
`)
	sc := scenarioFile(t, "echo.yaml", "name: told its names\nsystem: "+sys+"\nsteps:\n  - start: echo\n  - expect: {inbox.rows: 0}\n")
	nats, rabbit := testservers.URL(t, "nats"), testservers.URL(t, "rabbitmq")
	code, out, errOut := cli(t, "run", "-v", "--broker", "all", "--nats", nats, "--rabbitmq", rabbit, "--kafka", testservers.URL(t, "kafka"), sc)
	if code != exitOK {
		t.Fatalf("exit %d, want 0:\n%s\n%s", code, out, errOut)
	}
	// Every broker: its own name for the destination and the address of
	// the service's broker proxy, never the server's.
	for label, want := range map[string]string{
		"redis":         `\| dest=drill:[0-9a-f]{8}:[0-9]+ addr=127\.0\.0\.1:[0-9]+\n`,
		"nats":          `\| dest=drill_[0-9a-f]{8}_[0-9]+\.events addr=127\.0\.0\.1:[0-9]+\n`,
		"rabbitmq":      `\| dest=drill:[0-9a-f]{8}:[0-9]+ addr=127\.0\.0\.1:[0-9]+\n`,
		"kafka (kfake)": `\| dest=drill_[0-9a-f]{8}_[0-9]+ addr=127\.0\.0\.1:[0-9]+\n`,
	} {
		got := block(out, "--- PASS: told its names ["+label+"]")
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("%s: no service said %s in:\n%s", label, want, got)
		}
		for _, server := range []string{hostOf(t, nats), hostOf(t, rabbit), strings.TrimPrefix(testservers.URL(t, "kafka"), "kafka://")} {
			if strings.Contains(got, "addr="+server) {
				t.Errorf("%s: the service was told the server %s itself:\n%s", label, server, got)
			}
		}
	}
	// Each broker's wire is judged through its proxy; only stranded,
	// which the broker's own redelivery rules out, is not.
	for label, why := range map[string]string{
		"nats": "history: not judged: stranded: on nats: JetStream redelivers", "rabbitmq": "history: not judged: stranded: on rabbitmq: RabbitMQ requeues",
		"kafka (kfake)": "history: not judged: stranded: on kafka: a Kafka consumer group holds no record",
	} {
		got := block(out, "--- PASS: told its names ["+label+"]")
		for _, want := range []string{why, "history: no violation (acked_without_effect, double_applied, double_published, lost, phantom, projection_mismatch, stuck)"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: want %q in:\n%s", label, want, got)
			}
		}
	}
	if strings.Contains(out, "no publish/ack history without a broker proxy") {
		t.Errorf("a verdict says a broker has no proxy:\n%s", out)
	}
}

// hostOf is the host:port of a server URL (the test servers' name theirs).
func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil || p.Port() == "" {
		t.Fatalf("%s: no host:port", u)
	}
	return p.Host
}
