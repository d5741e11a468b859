package main

import (
	"strings"
	"testing"
)

// runner validate reports every problem of the files in one run, not a
// round per fix: three mistakes in one fault map, and a scenario's typo
// with a placeholder its system file's service lacks, are all said at
// once, exit 2.
func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	sys := teamSystem(t, `idle: {run: [sleep, "600"]}`, `idle: {run: [sleep, "600"], env: {T: "${topik}"}}`)
	three := scenarioFile(t, "three.yaml", `name: three mistakes
steps:
  - start: {service: idle, fault: {on: "consumer_db.comit(table=balances)", do: kil, nth: 0}}
`)
	code, _, errOut := cli(t, "validate", "--offline", "--system", sys, three)
	for _, want := range []string{
		three + `:3:36: on: consumer_db has no boundary "comit" (did you mean "commit"?)`,
		three + `:3:77: do: unknown action "kil" (did you mean "kill"?)`,
		three + `:3:91: nth: must be at least 1, got 0`,
		sys + `:5:40: services: idle: env T: unknown ${topik} (did you mean "topic"?)`,
		"4 problem(s) in 2 file(s); nothing was run",
	} {
		if code != exitInvalid || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, want 2 with\n%s\ngot:\n%s", code, want, errOut)
		}
	}
	// A mistake of the system file itself is said with the scenarios'
	// own, and the scenarios are not checked against a broken file.
	broken := teamSystem(t, "unpublished:", "unpublishd:")
	typo := scenarioFile(t, "typo.yaml", "name: a typo\nsteps:\n  - relya\n")
	code, _, errOut = cli(t, "validate", "--offline", "--system", broken, typo)
	if code != exitInvalid || !strings.Contains(errOut, `unknown key "unpublishd" (did you mean "unpublished"?)`) || !strings.Contains(errOut, typo+`:3:5: unknown step "relya"`) ||
		strings.Contains(errOut, "missing unpublished") || !strings.Contains(errOut, "2 problem(s) in 2 file(s)") {
		t.Errorf("a broken system file and a scenario's typo: exit %d, want 2 with both, each once:\n%s", code, errOut)
	}
}

// validate checks each broker fault on every broker it is asked for
// (--broker; without it, the system file's brokers:), naming the broker
// and suggesting from that broker's operations.
func TestValidateChecksTriggersPerBroker(t *testing.T) {
	anyBroker := teamSystem(t, "brokers: [redis]", "")
	produce := scenarioFile(t, "produce.yaml", `name: a Kafka-only trigger
steps:
  - start: {service: idle, fault: {on: "broker.reply(Produce)", do: kill}}
`)
	code, _, errOut := cli(t, "validate", "--offline", "--broker", "rabbitmq", "--system", anyBroker, produce)
	if want := produce + `:3:40: broker.reply(Produce) does not apply on rabbitmq (a run there skips the scenario): unknown operation "Produce"`; code != exitInvalid || !strings.Contains(errOut, want) {
		t.Errorf("Produce on rabbitmq: exit %d, want 2 with\n%s\ngot:\n%s", code, want, errOut)
	}
	if code, out, errOut := cli(t, "validate", "--offline", "--broker", "kafka", "--system", anyBroker, produce); code != exitOK {
		t.Errorf("Produce on kafka: exit %d, want 0\n%s%s", code, out, errOut)
	}
	code, _, errOut = cli(t, "validate", "--offline", "--broker", "all", "--system", anyBroker, produce)
	for _, b := range []string{"redis", "nats", "rabbitmq"} {
		if code != exitInvalid || !strings.Contains(errOut, "does not apply on "+b) || strings.Contains(errOut, "does not apply on kafka") {
			t.Errorf("--broker all: exit %d, want 2 naming %s and not kafka:\n%s", code, b, errOut)
		}
	}
	kafkaOnly := teamSystem(t, "brokers: [redis]", "brokers: [kafka]")
	typo := scenarioFile(t, "typo.yaml", `name: a typo on Kafka
steps:
  - start: {service: idle, fault: {on: "broker.reply(PUBLSH)", do: kill}}
`)
	code, _, errOut = cli(t, "validate", "--offline", "--system", kafkaOnly, typo)
	if want := `kafka: unknown operation "PUBLSH"`; code != exitInvalid || !strings.Contains(errOut, want) || !strings.Contains(errOut, `(did you mean "publish"?)`) || strings.Contains(errOut, "Redis") {
		t.Errorf("a typo on a Kafka-only system: exit %d, want 2 in Kafka's words (%s … did you mean \"publish\"?), no Redis:\n%s", code, want, errOut)
	}
}
