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
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/broker/redisstream"
)

func init() {
	broker.Register(
		redisstream.Kind,
		jetstream.Kind,
		rabbitmq.Kind,
		kafka.Kind,
	)
}
