package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// A consumer whose broker acks for it at delivery (RabbitMQ auto-ack,
// JetStream AckNone, kafkajs auto-commit) loses the event its refused
// COMMIT rolled back, though it never sends an ack of its own: the wire
// shows the delivery acked at delivery (an OffsetCommit on Kafka). Per
// broker, in one run: the library's scenario, which declares lost and
// acked_without_effect, passes; the same steps with no declaration fail,
// naming lost with the consumer; the same steps on the correct consumer
// (the last expect its inbox row) pass with nothing declared and the wire
// judged.
func TestNodeAutoAckLosesTheEvent(t *testing.T) {
	for _, c := range []struct {
		broker, module, scenario, correct, deliverOp, lostWhy string
	}{
		{"rabbitmq", "amqplib", "rabbitmq-scenarios/auto-ack-loses-the-event.yaml", "system-rabbitmq.yaml", "basic.deliver (no-ack): delivered by accounting, acked",
			"group accounting's consumers settled every copy of it the broker took (1): acked, or rejected without requeue"},
		{"nats", "nats", "nats-scenarios/auto-ack-loses-the-event.yaml", "system-nats.yaml", "MSG (AckNone): delivered entry 1 by accounting, acked",
			"every entry of it the broker holds (1) was acked, yet it was never applied"},
		{"kafka", "kafkajs", "kafka-scenarios/auto-commit-loses-the-event.yaml", "system-kafka.yaml", "Fetch: delivered entry 0/0 by accounting, acked",
			"every entry of it the broker holds (1) was acked, yet it was never applied"},
	} {
		t.Run(c.broker, func(t *testing.T) {
			t.Parallel()
			needNode(t, c.module)
			testAutoAck(t, c.broker, "../../examples/node/"+c.scenario, c.correct, c.deliverOp, c.lostWhy)
		})
	}
}

func testAutoAck(t *testing.T, broker, declared, correctSystem, deliverOp, lostWhy string) {
	src := mustRead(t, declared)
	buggy := regexp.MustCompile(`(?m)^system: \.\./(.*)$`).FindStringSubmatch(src)
	decl := "expect_violations: [lost, acked_without_effect]\n"
	if buggy == nil || !strings.Contains(src, decl) || !strings.Contains(src, "inbox.rows: 0") {
		t.Fatalf("%s: no system: ../ line, declaration or inbox.rows: 0 where this test rewrites them", declared)
	}
	abs := func(f string) string {
		p, err := filepath.Abs("../../examples/node/" + f)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The copies name their system file absolutely: they live in a temp dir.
	rewrite := func(name, system string, edit func(string) string) string {
		s := strings.Replace(src, buggy[0], "system: "+abs(system), 1)
		s = strings.Replace(strings.Replace(s, decl, "", 1), `name: "`, `name: "`+name+`: `, 1)
		return scenarioFile(t, name+".yaml", edit(s))
	}
	same := func(s string) string { return s }
	undeclared := rewrite("undeclared", buggy[1], same)
	correct := rewrite("correct", correctSystem, func(s string) string {
		return strings.Replace(s, "inbox.rows: 0", "inbox.rows: 1, projection: {accounting: {USD: {amount: 100, events: 1}}}", 1)
	})
	code, out, errOut := cli(t, "run", "-v", "--parallel", "3", "--broker", broker, "--"+broker, testservers.URL(t, broker), declared, undeclared, correct)
	if code != exitFailed {
		t.Fatalf("exit %d, want 1 (the undeclared lost event):\n%s\n%s", code, out, errOut)
	}
	check := func(what, blk string, wants ...string) {
		t.Helper()
		if blk == "" {
			t.Errorf("%s: no result in:\n%s", what, out)
		}
		for _, want := range wants {
			if !strings.Contains(blk, want) {
				t.Errorf("%s: want %q in:\n%s", what, want, blk)
			}
		}
	}
	check("the declared scenario", block(out, "--- PASS: anti-pattern: "),
		"history (declared): lost: consumer accounting, event bus-1: committed", lostWhy,
		"history (declared): acked_without_effect: consumer accounting, event bus-1:", "via its broker proxy) "+deliverOp, "ok inbox.rows: 0")
	check("the undeclared copy", block(out, "--- FAIL: undeclared: "),
		"FAIL "+undeclared+":", "lost: consumer accounting, event bus-1: committed", lostWhy,
		"acked_without_effect: consumer accounting, event bus-1:", "via its broker proxy) "+deliverOp, "| bus-1: rolled back (40001")
	check("the correct consumer", block(out, "--- PASS: correct: "), "ok inbox.rows: 1",
		"history: no violation (acked_without_effect, double_applied, double_published, lost, phantom, projection_mismatch, stuck)")
}
