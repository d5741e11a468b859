package scenario

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/steps"
)

// A consumer id names a Redis group, a NATS durable consumer and a RabbitMQ
// queue: one that some broker cannot take is a load error at the consumer
// parameter, naming the broker and its limit.
func TestConsumerIDsAreBrokerNames(t *testing.T) {
	long := strings.Repeat("c", 300)
	for step, want := range map[string]string{
		"consume: {consumer: " + long + "}":    "x.yaml:3:15: consumer id \"cccc",
		"consume(consumer=" + long + ")":       "x.yaml:3:13: consumer id",
		"claim: {idle: 0s, consumer: a.b}":     "x.yaml:3:23: consumer id \"a.b\": '.' at byte 1: a NATS JetStream consumer name cannot hold it",
		"consume: {consumer: \"acc ounting\"}": "x.yaml:3:15: consumer id \"acc ounting\": ' ' at byte 3: a NATS JetStream consumer name cannot hold it",
		"consume: {consumer: a>}":              "a NATS JetStream consumer name cannot hold it",
		"consume: {consumer: \"a:b\"}":         "would rewrite it to '_'",
		"consume: {consumer: dlq}":             "RabbitMQ's queue <scenario key>.dlq is the broker's own",
	} {
		_, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - "+step+"\n"))
		if len(errs) != 1 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%.60s:\n got %v\nwant one error containing %q", step, errs, want)
		}
	}
	if _, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - consume: {consumer: "+long+"}\n")); !strings.Contains(errs.Error(), "RabbitMQ") || !strings.Contains(errs.Error(), "255 bytes") {
		t.Errorf("a long consumer id's error names neither RabbitMQ nor its 255-byte limit: %v", errs)
	}
	for _, ok := range []string{"consume(consumer=accounting-v2)", "consume: {consumer: A_b-9}",
		"consume: {consumer: " + strings.Repeat("c", steps.MaxConsumerIDLen) + "}"} {
		if _, errs := Parse("x.yaml", []byte("name: x\nsteps:\n  - "+ok+"\n")); len(errs) > 0 {
			t.Errorf("%.60s: want no error, got %v", ok, errs)
		}
	}
}
