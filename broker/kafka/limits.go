package kafka

import "github.com/outboxdrill/runner/broker"

// Why Kafka lacks what it lacks, in its own documentation.
var limits = map[broker.Capability]string{
	broker.PendingCount:     "a consumer group keeps one committed offset per partition, not an acknowledgement per record, so nothing counts delivered-but-unacknowledged records (https://kafka.apache.org/documentation/#design_consumerposition)",
	broker.PendingList:      "a consumer group keeps one committed offset per partition, not a list of unacknowledged records with their ages (https://kafka.apache.org/documentation/#design_consumerposition)",
	broker.ClaimByIdle:      "a partition moves to another member of the group only in a rebalance (the member left or its session.timeout.ms ran out); no member can take over one record at an idle time of its choosing (https://kafka.apache.org/documentation/#consumerconfigs_session.timeout.ms)",
	broker.BrokerDedupe:     "the idempotent producer drops a retried batch only within one producer session (producer id and sequence numbers); a relay that restarts and publishes again writes a second record (https://kafka.apache.org/documentation/#producerconfigs_enable.idempotence)",
	broker.NativeDeadLetter: "Kafka brokers have no dead-letter queue: a share group archives a record that reached its delivery limit (group.share.delivery.count.limit, KIP-932) without writing it anywhere, a dead-letter topic for share groups is only proposed (KIP-1191), and only Kafka Connect's sink connectors route failed records to one (https://kafka.apache.org/documentation/#sinkconnectorconfigs_errors.deadletterqueue.topic.name, https://cwiki.apache.org/confluence/display/KAFKA/KIP-1191%3A+Dead-letter+queues+for+share+groups)",
	broker.SideStore:        "the runner's setnx anti-pattern needs Redis's HSETNX; Kafka has no key-value store beside its topics (https://kafka.apache.org/documentation/#design_compactionbasics)",
	broker.GroupLag:         "a share group (kafka: {share: true}) acknowledges records one by one and keeps no committed offset to count from; the runner does not read share-group state (https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka)",
	broker.DeliveryCount:    "a classic consumer group counts no deliveries: a record comes back after a seek or rebalance with nothing saying how often (https://kafka.apache.org/documentation/#design_consumerposition); share groups (kafka: {share: true}) count them",
}
