// Package kinds is the one list of the runner's brokers: each line names a
// broker package's Kind, and every command, document, report and test
// loops over them. The order is the order of --broker all, of report
// columns and of the reference; the first is the default broker
// (broker.Default).
//
// Only cmd/runner and tests import it: cmd/runner passes All to the
// loaders (system.Load, scenario.LoadFiles) and its import fills the
// registry (broker.Kinds) that the packages below it read at call time, so
// that the system file's parser, the scenario loader and the steps link no
// broker client. The broker packages' own tests do not link it (it imports
// them): they hand their Kind to brokertest and testservers.
package kinds

import (
	"slices"
	"sync"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/jetstream/natsproxy"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/broker/kafka/kafkaproxy"
	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/broker/rabbitmq/amqpproxy"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/broker/redisstream/respproxy"
)

// all is the list, built once: the proxies hang here, not in the broker
// packages, because the proxies' own tests take their server from the
// broker packages.
var all = sync.OnceValue(func() []*broker.Kind {
	redisstream.Kind.Proxy = respproxy.Kind{}
	jetstream.Kind.Proxy = natsproxy.Kind{}
	rabbitmq.Kind.Proxy = amqpproxy.Kind{}
	kafka.Kind.Proxy = kafkaproxy.Kind{}
	return []*broker.Kind{
		redisstream.Kind,
		jetstream.Kind,
		rabbitmq.Kind,
		kafka.Kind,
	}
})

// All are the built-in kinds, in order, each with its protocol proxy.
func All() []*broker.Kind { return slices.Clone(all()) }

// The registry holds the list wherever this package is linked: cmd/runner
// and the tests.
func init() { broker.Register(All()...) }

// ServeChild serves the runner's own server that runs as this program
// re-executed (kfake), and exits, when this process is one; otherwise it
// returns at once. main calls it first.
func ServeChild() { kafkaserver.ServeChild() }
