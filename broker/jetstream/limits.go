package jetstream

import "github.com/outboxdrill/runner/broker"

// Why JetStream lacks what it lacks, in its own documentation.
var limits = map[broker.Capability]string{
	broker.BrokerTxn:    "JetStream has no transaction spanning an ack and a publish: an acknowledgement and a publish are separate operations (https://docs.nats.io/using-nats/developer/develop_jetstream/consumers#acknowledging-messages)",
	broker.PendingList:  "a consumer reports counts only (NumAckPending, NumRedelivered), not each unacknowledged message with its age (https://docs.nats.io/nats-concepts/jetstream/consumers)",
	broker.ClaimByIdle:  "a message is redelivered only after the consumer's AckWait, to whichever client pulls next; no client can take one over at an idle time of its choosing (https://docs.nats.io/nats-concepts/jetstream/consumers#ackwait)",
	broker.SideStore:    "the runner's setnx anti-pattern needs Redis's HSETNX; JetStream's key-value store is a separate bucket the runner does not model (https://docs.nats.io/nats-concepts/jetstream/key-value-store)",
	broker.BrokerDedupe: "this scenario turned Nats-Msg-Id off (nats: {msg_id: false}); JetStream deduplicates only publishes carrying it (https://docs.nats.io/using-nats/developer/develop_jetstream/model_deep_dive#message-deduplication)",
}
