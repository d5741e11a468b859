package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/kafka"
)

// A broker's own key (kafka:, nats:) is decoded by the step parameters'
// tag machinery from its kind's Options struct, with its errors worded for
// the key: the forms and messages it had when hand-parsed.
func TestBrokerKeysDecodeWithTheParamTags(t *testing.T) {
	sc := parseOK(t, "name: k\nkafka: {partitions: 3, share: true}\nnats: {msg_id: false, dedupe_window: 1s}\nsteps: [produce]\n")
	if diff := cmp.Diff(&kafka.ScenarioOptions{Partitions: 3, Share: true}, sc.BrokerOptions[broker.Kafka]); diff != "" {
		t.Errorf("kafka (-want +got):\n%s", diff)
	}
	want := &jetstream.ScenarioOptions{MsgID: false, DedupeWindow: time.Second, AckWait: time.Second}
	if diff := cmp.Diff(want, sc.BrokerOptions[broker.NATS]); diff != "" {
		t.Errorf("nats (-want +got):\n%s", diff)
	}
	if !sc.Tuned(broker.Kafka) || !sc.Tuned(broker.NATS) || sc.Tuned(broker.Redis) {
		t.Errorf("Tuned: kafka %v nats %v redis %v, want true true false", sc.Tuned(broker.Kafka), sc.Tuned(broker.NATS), sc.Tuned(broker.Redis))
	}

	plain := parseOK(t, "name: p\nsteps: [produce]\n")
	if diff := cmp.Diff(&jetstream.ScenarioOptions{MsgID: true, DedupeWindow: 2 * time.Minute, AckWait: time.Second}, plain.BrokerOptions[broker.NATS]); diff != "" {
		t.Errorf("nats defaults (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&kafka.ScenarioOptions{Partitions: 1}, plain.BrokerOptions[broker.Kafka]); diff != "" {
		t.Errorf("kafka defaults (-want +got):\n%s", diff)
	}
	if plain.Tuned(broker.NATS) || plain.Broker(broker.NATS).Options != plain.BrokerOptions[broker.NATS] {
		t.Error("a scenario without nats: is tuned, or hands its broker other options")
	}
}

func TestBrokerKeyErrors(t *testing.T) {
	for src, want := range map[string]string{
		"kafka: {partition: 3}":      `t.yaml:2:9: kafka: unknown key "partition" (did you mean "partitions"?); known: partitions, share`,
		"kafka: {partitions: 0}":     `t.yaml:2:21: kafka: partitions: must be at least 1, got 0`,
		"kafka: {share: maybe}":      `t.yaml:2:16: kafka: share: want true or false, got "maybe"`,
		"kafka: 3":                   `t.yaml:2:8: kafka: want a map with partitions, share`,
		"nats: {msgid: false}":       `t.yaml:2:8: nats: unknown key "msgid" (did you mean "msg_id"?); known: msg_id, dedupe_window, ack_wait`,
		"nats: {ack_wait: 5}":        `t.yaml:2:18: nats: ack_wait: "5" needs a unit`,
		"nats: {dedupe_window: [1]}": `t.yaml:2:23: nats: dedupe_window: want a single duration value, got a list`,
	} {
		_, errs := Parse("t.yaml", []byte("name: x\n"+src+"\nsteps: [produce]\n"), testKinds)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("%s: got %v, want one error containing %q", src, errs, want)
		}
	}
}
