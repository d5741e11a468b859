package rabbitmq

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/rabbitmq/rabbitmqserver"
	"github.com/outboxdrill/runner/internal/redact"
)

// Kind is RabbitMQ (quorum queues) as the runner knows it (broker/kinds
// registers it).
var Kind = &broker.Kind{
	Name: broker.RabbitMQ, Title: "RabbitMQ", Product: "RabbitMQ",
	Flag: "rabbitmq", Env: "RUNNER_RABBITMQ_URL",
	FlagUsage: "the RabbitMQ server at `URL` (e.g. amqp://guest:guest@127.0.0.1:5672/)", Own: "one", Want: "a RabbitMQ URL",
	Ports:        map[string]string{"amqp": "5672", "amqps": "5671"},
	Placeholders: []string{"exchange", "queue"},
	Local:        "amqp://guest:guest@127.0.0.1:5672/",
	Probe: broker.Probe{
		// The AMQP 0-9-1 header: the answer is a method frame
		// (Connection.Start) on channel 0.
		Protocol: "RabbitMQ (AMQP 0-9-1)", Hello: []byte("AMQP\x00\x00\x09\x01"), Need: 3,
		OK:    func(a []byte) bool { return a[0] == 1 && a[1] == 0 && a[2] == 0 },
		Addrs: probeAddrs,
		Guess: func(a []byte) string {
			if bytes.HasPrefix(a, []byte("AMQP")) {
				return "an AMQP server such as RabbitMQ"
			}
			return ""
		},
	},
	Capabilities: capabilities,

	Start:      start,
	Open:       open,
	Dir:        rabbitmqserver.Dir,
	DirOwner:   rabbitmqserver.Credential,
	Limits:     limits,
	ConsumerID: consumerID,
	Verbs:      broker.Verbs{Publish: "basic.publish (confirm)", Read: "basic.get", Ack: "basic.ack", Claim: "basic.get (requeued)"},
	Mechanisms: map[broker.Mechanism]string{
		broker.SecondPublish: "a second message in every bound queue",
		broker.Takeover:      "none per message: when the worker's channel closes (its crash) the broker requeues ALL its unacked deliveries, marked Redelivered, for whoever reads next",
		broker.RolledBack:    "basic.nack with requeue: back in the queue at once, marked Redelivered (with `nack: false` it stays with the channel until that closes)",
		broker.Inspection:    "over AMQP only ready messages (queue.declare-ok); unacked counts need the management plugin, so `stream.pending` is n/a",
		broker.DeadLetters:   "`broker_dlq`: quorum-queue x-delivery-limit + a dead-letter exchange; beside the application-level DLQ",
		broker.Durability:    "quorum queue: the publisher confirm follows the Raft log's fsync",
	},
}

func probeAddrs(url string) ([]broker.Addr, bool, error) {
	uri, err := amqp.ParseURI(url)
	if err != nil {
		return nil, false, err
	}
	return []broker.Addr{{Network: "tcp", Addr: net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))}}, uri.Scheme == "amqp", nil
}

// start starts the runner's own node: it boots in 6–13 s here, which
// --rabbitmq saves.
func start(ctx context.Context, h broker.Host) (string, broker.Process, error) {
	srv, err := rabbitmqserver.Start(ctx, rabbitmqserver.Options{})
	if err != nil {
		return "", nil, err
	}
	h.DeferStop(srv.Discard)
	h.Logf("started RabbitMQ pid %d at %s in %s", srv.PID(), redact.URL(srv.URL()), srv.Dir)
	return srv.URL(), srv, nil
}

// consumerID: a consumer id names the group's queue, <scenario key>.<id>
// (groupQueue): an AMQP 0-9-1 short string of at most 255 bytes (AMQP
// 0-9-1 §4.2.5.3; https://www.rabbitmq.com/docs/queues#names), and not
// <key>.log or <key>.dlq, the entry log and the dead letters.
func consumerID(id string) error {
	if len(id) > broker.MaxQueueConsumerID {
		return fmt.Errorf("%d bytes, at most %d: RabbitMQ names its queue <scenario key>.<consumer id>, and AMQP 0-9-1 queue names are short strings of at most 255 bytes (%d are left after a scenario key of up to %d)",
			len(id), broker.MaxQueueConsumerID, broker.MaxQueueConsumerID, broker.ScenarioKeyMaxLen)
	}
	if id == "log" || id == "dlq" {
		return fmt.Errorf("RabbitMQ's queue <scenario key>.%s is the broker's own (the entry log and the dead letters are <key>.log and <key>.dlq)", id)
	}
	return nil
}
