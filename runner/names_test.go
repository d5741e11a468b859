package runner

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/scenario"
)

// A consumer id one broker cannot name (a '.' for a NATS durable, "log"
// for a RabbitMQ queue, 300 bytes for an AMQP short string) skips the
// scenario there, at the step that names it, with the broker's reason;
// the other brokers run it.
func TestConsumerIDsOneBrokerRefusesSkipThere(t *testing.T) {
	long := strings.Repeat("c", 300)
	for _, tc := range []struct {
		id   string
		skip map[string]string // broker → a fragment of the reason; absent: runs
	}{
		{"billing.v2", map[string]string{broker.NATS: "'.' at byte 7: a NATS JetStream consumer name cannot hold it"}},
		{"acc ounting", map[string]string{broker.NATS: "' ' at byte 3"}},
		{"a:b", map[string]string{broker.NATS: "would rewrite it to '_'"}},
		{"log", map[string]string{broker.RabbitMQ: "<scenario key>.log is the broker's own"}},
		{"dlq", map[string]string{broker.RabbitMQ: "<scenario key>.dlq is the broker's own"}},
		{long, map[string]string{broker.RabbitMQ: "AMQP 0-9-1 queue names are short strings of at most 255 bytes", broker.NATS: "at most 255"}},
		{"accounting-v2", nil},
		{strings.Repeat("c", broker.MaxQueueConsumerID), nil},
	} {
		scs, errs := scenario.Parse("x.yaml", []byte("name: x\nsteps:\n  - produce\n  - consume: {consumer: \""+tc.id+"\"}\n"), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatalf("%.20s: a load error %v; a broker's own limit skips instead", tc.id, errs)
		}
		for _, b := range broker.Names() {
			at, why := consumerIDSkip(scs[0], b)
			want, skips := tc.skip[b]
			switch {
			case skips && (!strings.Contains(why, want) || at.Line != 4):
				t.Errorf("%.20s on %s: skip %q at %s, want one containing %q at line 4", tc.id, b, why, at, want)
			case !skips && why != "":
				t.Errorf("%.20s on %s: skipped (%s), want it run", tc.id, b, why)
			}
		}
	}
}
