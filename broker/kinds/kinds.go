// Package kinds is the one list of the runner's brokers: each line
// registers a broker package's Kind, and every command, document, report
// and test loops over what is registered (broker.Kinds). The order is the
// order of --broker all, of report columns and of the reference; the first
// is the default broker.
//
// A package that validates broker names (system, steps) imports this one
// for its side effect, so the names are complete wherever a scenario or a
// system file is read. The broker packages' own tests do not link it (it
// imports them): they hand their Kind to brokertest and testservers.
package kinds

import (
	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/jetstream/natsproxy"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/broker/kafka/kafkaproxy"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/broker/rabbitmq/amqpproxy"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/broker/redisstream/respproxy"
)

func init() {
	// The protocol proxies hang here, not in the broker packages: the
	// proxies' own tests take their server from the broker packages.
	redisstream.Kind.Proxy = respproxy.Kind{}
	jetstream.Kind.Proxy = natsproxy.Kind{}
	rabbitmq.Kind.Proxy = amqpproxy.Kind{}
	kafka.Kind.Proxy = kafkaproxy.Kind{}
	broker.Register(
		redisstream.Kind,
		jetstream.Kind,
		rabbitmq.Kind,
		kafka.Kind,
	)
}
