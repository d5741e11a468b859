package steps

import (
	"fmt"
	"unicode/utf8"

	"github.com/outboxdrill/runner/broker"
)

// A consumer id names broker objects: a Redis group, a NATS durable
// consumer, a RabbitMQ queue, a Kafka group. What every broker needs is
// checked at load time (CheckConsumerID): a name, valid UTF-8, no control
// character. What one broker cannot take is that broker's (its
// descriptor's ConsumerID, broker.Kind): a scenario whose consumer id one
// broker refuses is skipped there, with the broker's reason, and runs on
// the others — never sent to that broker (on RabbitMQ a refused name
// would close the run's shared connection for every later scenario).

// CheckConsumerID says why id cannot be a consumer id on any broker, or
// returns nil.
func CheckConsumerID(id string) error {
	if id == "" {
		return fmt.Errorf("empty consumer id: every broker needs a name for the consumer's group (Redis, Kafka), durable consumer (NATS JetStream) or queue (RabbitMQ)")
	}
	for i, r := range id {
		switch {
		case r == utf8.RuneError:
			return fmt.Errorf("consumer id %q: not valid UTF-8 at byte %d", broker.Clip(id), i)
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("consumer id %q: control character %q at byte %d: a broker name cannot hold it", broker.Clip(id), r, i)
		}
	}
	return nil
}
