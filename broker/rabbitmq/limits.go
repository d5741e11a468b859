package rabbitmq

import "github.com/outboxdrill/runner/broker"

// Why RabbitMQ lacks what it lacks, in its own documentation.
var limits = map[broker.Capability]string{
	broker.BrokerTxn:     "the runner drives broker transactions only through Kafka's transactional producer; AMQP 0-9-1 channel transactions (tx.select) cover a channel's publishes and acks, not a database, and RabbitMQ documents their guarantees as weak (https://www.rabbitmq.com/docs/semantics#tx)",
	broker.PendingCount:  "over AMQP 0-9-1 a queue reports only its ready messages (queue.declare-ok message-count excludes those awaiting acknowledgement; https://www.rabbitmq.com/amqp-0-9-1-reference#queue.declare-ok); the unacknowledged count is in the management plugin, which the runner does not enable",
	broker.GroupLag:      "over AMQP 0-9-1 a queue tells its ready messages and its consumers (queue.declare-ok message-count and consumer-count, https://www.rabbitmq.com/amqp-0-9-1-reference#queue.declare-ok), not the messages delivered and awaiting acknowledgement; those are counted only by the management plugin's HTTP API (messages_unacknowledged, https://www.rabbitmq.com/docs/management#http-api) or rabbitmqctl list_queues (https://www.rabbitmq.com/docs/man/rabbitmqctl.8#list_queues), which the runner does not reach through an AMQP URL",
	broker.PendingList:   "RabbitMQ lists no unacknowledged deliveries with their age over AMQP 0-9-1 (https://www.rabbitmq.com/amqp-0-9-1-reference#queue.declare-ok)",
	broker.ClaimByIdle:   "a delivery stays with its channel until it is acked, nacked or the channel closes; no per-message idle reclaim exists, and the delivery acknowledgement timeout closes the whole channel (https://www.rabbitmq.com/docs/consumers#acknowledgement-timeout)",
	broker.BrokerDedupe:  "a queue stores every message published to it; RabbitMQ has no message deduplication (https://www.rabbitmq.com/docs/queues)",
	broker.ReplayHistory: "an exchange routes a message to the queues bound when it is published; a queue declared later (a new consumer id) never sees earlier messages (https://www.rabbitmq.com/tutorials/amqp-concepts#exchanges)",
	broker.Retention:     "a queue cannot be told to drop all but its newest N messages at once; a max-length limit drops from the head only as new messages arrive (https://www.rabbitmq.com/docs/maxlength)",
	broker.SideStore:     "RabbitMQ is a message broker without a key-value store beside its queues (https://www.rabbitmq.com/docs/queues)",
}
