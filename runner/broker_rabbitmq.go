package runner

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
	"github.com/outboxdrill/runner/steps"
)

func init() { brokerKinds[broker.RabbitMQ] = openRabbitMQ }

// rabbitConn is the run's AMQP connection.
type rabbitConn struct{ conn *amqp.Connection }

func openRabbitMQ(ctx context.Context, w *World, url string, p *Params) (brokerConn, error) {
	if url == "" {
		// A RabbitMQ node boots in 6–13 s here: give --rabbitmq to skip that.
		srv, err := servers.StartRabbitMQ(ctx, servers.RabbitMQOptions{})
		if err != nil {
			return nil, err
		}
		w.undo.add(srv.Discard)
		url = srv.URL()
		p.logf("started RabbitMQ pid %d at %s in %s", srv.PID(), redact.URL(url), srv.Dir)
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redact.URL(url), redact.Err(url, err))
	}
	w.undo.add(func(context.Context) error { return conn.Close() })
	return rabbitConn{conn}, nil
}

// New declares a queue per consumer id the scenario names, before anything
// is published, as infrastructure-as-code would.
func (c rabbitConn) New(ctx context.Context, key string, sc *scenario.Scenario) (broker.Broker, error) {
	ids := sc.Consumers()
	if len(ids) == 0 {
		ids = []string{steps.DefaultConsumer}
	}
	return rabbitmq.New(ctx, c.conn, key, ids)
}

// Server: none, even the runner's own node. Killed within ~0.5 s of
// declaring a quorum queue, RabbitMQ 3.10 loses the queue's registration and
// hangs reads on it for 60 s (rabbitmq/ra PR #443, fixed in 2024): a drill
// would test that bug, not the pipeline.
func (c rabbitConn) Server() (proc, string) {
	return nil, "process faults on RabbitMQ are not run: a 3.10 node killed within ~0.5 s of declaring a quorum queue loses it (rabbitmq/ra#443)"
}

func (c rabbitConn) Ready(context.Context) error { return nil }

// Hints tell how to look at a kept scenario's queues.
func (c rabbitConn) Hints(key string) []string {
	return []string{"queues:      rabbitmqctl list_queues name messages messages_unacknowledged | grep " + key}
}
