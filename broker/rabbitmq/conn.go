package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/redact"
)

// conn is a run's AMQP connection (the registry's and clean's); each
// scenario gets a connection of its own (New).
type conn struct {
	conn *amqp.Connection
	url  string
	reg  *registry
}

// dialURL connects to url, giving up on the TCP connection after 5 s.
func dialURL(url string) (*amqp.Connection, error) {
	c, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redact.URL(url), redact.Err(url, err))
	}
	return c, nil
}

func open(_ context.Context, h broker.Host, url string, _ broker.Process) (broker.Conn, error) {
	c, err := dialURL(url)
	if err != nil {
		return nil, err
	}
	h.Defer(func(context.Context) error { return c.Close() })
	return conn{c, url, &registry{}}, nil
}

// New declares a queue per consumer id the scenario names, before anything
// is published, as infrastructure-as-code would.
func (c conn) New(ctx context.Context, key string, sc broker.Scenario) (broker.Broker, error) {
	// A connection per scenario: an error the server answers with a
	// connection close (a frame it refuses) ends this scenario's
	// connection, never the run's or another scenario's.
	own, err := dialURL(c.url)
	if err != nil {
		return nil, err
	}
	var opts []Option
	if sc.DeliveryLimit > 0 {
		opts = append(opts, WithDeliveryLimit(sc.DeliveryLimit))
	}
	b, err := NewRecorded(ctx, own, key, sc.Consumers, c.reg.record, opts...)
	if err != nil {
		own.Close()
		return nil, err
	}
	return ownConnBroker{b, own}, nil
}

// ownConnBroker is a scenario's broker on its own connection, closed with
// the broker's objects.
type ownConnBroker struct {
	*Broker
	conn *amqp.Connection
}

func (b ownConnBroker) Delete(ctx context.Context) error {
	return errors.Join(b.Broker.Delete(ctx), b.conn.Close())
}

// Server: none, even the runner's own node. Killed within ~0.5 s of
// declaring a quorum queue, RabbitMQ 3.10 loses the queue's registration and
// hangs reads on it for 60 s (rabbitmq/ra PR #443, fixed in 2024): a drill
// would test that bug, not the pipeline.
func (c conn) Server() (broker.Process, string) {
	return nil, "process faults on RabbitMQ are not run yet: a 3.10 node killed within ~0.5 s of declaring a quorum queue loses its registration and hangs reads on it for 60 s (https://github.com/rabbitmq/ra/pull/443); drilling a crash needs the runner's own node, a wait past that window and a reconnect after the restart, which the runner does not do yet"
}

func (c conn) Ready(context.Context) error { return nil }

// Hints tell how to look at a kept scenario's queues.
func (c conn) Hints(key string) []string {
	return []string{"queues:      rabbitmqctl list_queues name messages messages_unacknowledged | grep " + key}
}
