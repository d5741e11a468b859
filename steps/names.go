package steps

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// A consumer id names broker objects, so it must be a name every broker the
// runner supports takes as it is. Checked at load time: a name a broker
// refuses fails at run time, and on RabbitMQ it fails more than its own
// scenario (the client closes the run's shared connection on a channel
// error; every later RabbitMQ scenario fails).
//
// How each broker uses the consumer id:
//
//   - Redis Streams: the consumer group's name (XGROUP CREATE key group).
//     Group names are binary-safe strings; no limit that matters here.
//   - NATS JetStream: the durable pull consumer's name (broker/jetstream:
//     sanitize(id)). nats-server refuses durable names with whitespace, '.',
//     '*', '>', '/' or '\' and longer than 255 bytes (JSMaxNameLen); the
//     docs recommend alphanumerics ("Naming Streams, Consumers, and
//     Accounts", https://docs.nats.io/running-a-nats-service/nats_admin/jetstream_admin/naming).
//     The runner rewrites any other character to '_', so two ids could
//     meet in one name: only A-Z a-z 0-9 '_' '-' are kept as written.
//   - RabbitMQ: the group's queue, named <scenario key>.<consumer id>
//     (broker/rabbitmq groupQueue); the queues "<key>.log" and "<key>.dlq"
//     are the entry log and the dead letters. AMQP 0-9-1 sends a queue
//     name as a short string, at most 255 bytes (AMQP 0-9-1 spec §4.2.5.3;
//     https://www.rabbitmq.com/docs/queues#names).
//
// So: 1 to MaxConsumerIDLen bytes of A-Z a-z 0-9 '_' '-', and neither
// "log" nor "dlq".

// MaxConsumerIDLen is the longest consumer id: RabbitMQ's queue name
// <scenario key>.<consumer id> must fit AMQP's 255-byte short string, and
// the runner's scenario keys ("drill:<8 hex run id>:<sequence>") are at most
// ScenarioKeyMaxLen bytes (runner tests that they are).
const MaxConsumerIDLen = amqpShortStrMax - ScenarioKeyMaxLen - len(".")

// ScenarioKeyMaxLen is the room a consumer id leaves for the scenario key
// that prefixes its RabbitMQ queue name: "drill:" + 8 hex + ":" + a
// sequence number of up to 19 digits is 34 bytes.
const ScenarioKeyMaxLen = 34

// amqpShortStrMax is the longest AMQP 0-9-1 short string (a queue name).
const amqpShortStrMax = 255

// rabbitReserved are the queue suffixes the RabbitMQ broker takes itself.
var rabbitReserved = []string{"log", "dlq"}

// CheckConsumerID says why id cannot be a consumer id on some broker, or
// returns nil.
func CheckConsumerID(id string) error {
	if id == "" {
		return fmt.Errorf("empty consumer id: every broker needs a name for the consumer's group (Redis), durable consumer (NATS JetStream) or queue (RabbitMQ)")
	}
	for i, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			continue
		}
		why := fmt.Sprintf("a NATS JetStream consumer name cannot hold it (nats-server refuses whitespace, '.', '*', '>', '/', '\\' and control characters)")
		switch {
		case r == utf8.RuneError:
			why = "it is not valid UTF-8"
		case !(r == '.' || r == '*' || r == '>' || r == '/' || r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r)):
			why = "the runner would rewrite it to '_' in the NATS JetStream consumer name, where two consumer ids could meet"
		}
		return fmt.Errorf("consumer id %q: %q at byte %d: %s; a consumer id takes only A-Z a-z 0-9 _ -", clip(id), r, i, why)
	}
	if len(id) > MaxConsumerIDLen {
		return fmt.Errorf("consumer id %q is %d bytes, at most %d: RabbitMQ names its queue <scenario key>.<consumer id>, and AMQP 0-9-1 queue names are short strings of at most %d bytes (%d are left after a scenario key of up to %d)",
			clip(id), len(id), MaxConsumerIDLen, amqpShortStrMax, MaxConsumerIDLen, ScenarioKeyMaxLen)
	}
	for _, r := range rabbitReserved {
		if id == r {
			return fmt.Errorf("consumer id %q: RabbitMQ's queue <scenario key>.%s is the broker's own (the entry log and the dead letters are <key>.log and <key>.dlq)", id, id)
		}
	}
	return nil
}

// clip shortens a long id for a message.
func clip(id string) string {
	const keep = 40
	if len(id) <= keep {
		return id
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", id[:cut], len(id))
}
