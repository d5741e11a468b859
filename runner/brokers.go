package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"outboxdrill/broker"
	jsbroker "outboxdrill/broker/jetstream"
	"outboxdrill/broker/rabbitmq"
	"outboxdrill/broker/redisstream"
	"outboxdrill/servers"
	"outboxdrill/steps"
)

// ParseBrokers reads --broker: a name, a comma-separated list, or "all".
func ParseBrokers(s string) ([]string, error) {
	if s == "" {
		return []string{broker.Redis}, nil
	}
	if s == "all" {
		return slices.Clone(broker.Names), nil
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		if !slices.Contains(broker.Names, b) {
			return nil, fmt.Errorf("--broker: unknown broker %q%s; one of: %s, or all", b, steps.Suggest(b, broker.Names), strings.Join(broker.Names, ", "))
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// natsOptions tune a managed or given NATS connection for drills: a server a
// step killed is the answer, not a blip to wait out, so nothing is buffered
// while disconnected and reconnects are quick.
func natsOptions() []nats.Option {
	return []nats.Option{nats.Name("outboxdrill"), nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond),
		nats.ReconnectBufSize(-1), nats.Timeout(2 * time.Second)}
}

// startBrokers connects to (or starts) every selected broker other than
// Redis, which startServers handles with PostgreSQL.
func (w *World) startBrokers(ctx context.Context, p *Params) error {
	for _, b := range p.Brokers {
		switch b {
		case broker.NATS:
			if err := w.openNATS(ctx, p); err != nil {
				return fmt.Errorf("NATS: %w", err)
			}
		case broker.RabbitMQ:
			if err := w.openRabbitMQ(ctx, p); err != nil {
				return fmt.Errorf("RabbitMQ: %w", err)
			}
		}
	}
	return nil
}

func (w *World) openNATS(ctx context.Context, p *Params) error {
	url := p.NATSURL
	if url == "" {
		srv, err := servers.StartNATS(ctx, servers.NATSOptions{})
		if err != nil {
			return err
		}
		w.undo.add(srv.Discard)
		w.natsSrv, url = srv, srv.URL()
		p.logf("started NATS pid %d at %s in %s", srv.PID(), url, srv.Dir)
	}
	nc, err := nats.Connect(url, natsOptions()...)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	w.undo.add(func(context.Context) error { nc.Close(); return nil })
	w.nc = nc
	w.js, err = jetstream.New(nc)
	return err
}

func (w *World) openRabbitMQ(ctx context.Context, p *Params) error {
	url := p.RabbitMQURL
	if url == "" {
		// A RabbitMQ node boots in 6–13 s here: give --rabbitmq to skip that.
		srv, err := servers.StartRabbitMQ(ctx, servers.RabbitMQOptions{})
		if err != nil {
			return err
		}
		w.undo.add(srv.Discard)
		w.rabbitSrv, url = srv, srv.URL()
		p.logf("started RabbitMQ pid %d at %s in %s", srv.PID(), url, srv.Dir)
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("%s: %w", redact(url), err)
	}
	w.amqp = conn
	w.undo.add(func(context.Context) error { return conn.Close() })
	return nil
}

// newBroker is scenario sc's own stream (or queues) on broker b, named key.
func (w *World) newBroker(ctx context.Context, b, key string, sc *Scenario) (broker.Broker, error) {
	switch b {
	case broker.NATS:
		return jsbroker.New(ctx, w.js, key, sc.NATS)
	case broker.RabbitMQ:
		ids, _ := consumerIDs(sc)
		if len(ids) == 0 {
			ids = []string{"accounting"}
		}
		return rabbitmq.New(ctx, w.amqp, key, ids)
	}
	return redisstream.New(w.rdb, key), nil
}

// needs lists what scenario sc asks of a broker b, from its steps'
// parameters and the checks that apply on b, in a stable order.
func needs(sc *Scenario, b string) []broker.Capability {
	set := map[broker.Capability]bool{}
	for _, c := range sc.Steps {
		switch p := c.Params.(type) {
		case *steps.ClaimParams:
			set[broker.ClaimByIdle] = set[broker.ClaimByIdle] || p.Idle > 0 || p.Auto
			set[broker.SideStore] = set[broker.SideStore] || p.Dedupe == "setnx"
		case *steps.ConsumeParams:
			set[broker.SideStore] = set[broker.SideStore] || p.Dedupe == "setnx"
		case *steps.BrokerParams:
			set[broker.Retention] = set[broker.Retention] || p.Trim != nil
		}
		for _, cw := range c.Expect.For(b).Checks {
			if cw.Check.Needs != "" {
				set[cw.Check.Needs] = true
			}
		}
	}
	var out []broker.Capability
	for c, on := range set {
		if on {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// lacking is the skip reason of a scenario whose needs broker b lacks, or "".
func lacking(sc *Scenario, b string, caps broker.Capabilities) string {
	var miss []string
	for _, c := range needs(sc, b) {
		if !caps.Has(c) {
			miss = append(miss, string(c))
		}
	}
	if len(miss) == 0 {
		return ""
	}
	return fmt.Sprintf("needs %s, which %s does not have", strings.Join(miss, ", "), b)
}

// control is the process control of one scenario: its broker and the
// run's PostgreSQL servers.
type control struct {
	w      *World
	broker string
}

func (c control) Cannot(step, action string) string {
	done := map[string]string{"kill": "killed", "stop": "stopped", "start": "started", "restart": "restarted"}[action]
	given := func(what, flag string) string {
		return fmt.Sprintf("needs the runner's own %s process; one given with %s is not %s by the runner", what, flag, done)
	}
	switch {
	case step == "producer_db" && c.w.pgs[producerSide] == nil, step == "consumer_db" && c.w.pgs[consumerSide] == nil:
		return given("PostgreSQL", "--pg")
	case step != "broker":
		return ""
	case c.broker == broker.Redis && c.w.redis == nil:
		return given("Redis", "--redis")
	case c.broker == broker.NATS && c.w.natsSrv == nil:
		return given("NATS", "--nats")
	case c.broker == broker.RabbitMQ:
		// Killed within ~0.5 s of declaring a quorum queue, RabbitMQ 3.10
		// loses the queue's registration and hangs reads on it for 60 s
		// (rabbitmq/ra PR #443, fixed in 2024): that would test the bug,
		// not the pipeline.
		return "process faults on RabbitMQ are not run: a 3.10 node killed within ~0.5 s of declaring a quorum queue loses it (rabbitmq/ra#443)"
	}
	return ""
}

func (c control) Broker(ctx context.Context, action string) error {
	switch c.broker {
	case broker.Redis:
		return process(ctx, c.w.redis, action)
	}
	if err := process(ctx, c.w.natsSrv, action); err != nil || action == "kill" || action == "stop" {
		return err
	}
	// The client reconnects by itself; the next step must find it connected.
	for !c.w.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func (c control) Postgres(ctx context.Context, side, action string) error {
	return c.w.Postgres(ctx, side, action)
}

// proc is a server process the runner can crash and start.
type proc interface {
	Kill(context.Context) error
	Halt(context.Context) error
	Start(context.Context) error
}

func process(ctx context.Context, s proc, action string) error {
	switch action {
	case "kill":
		return s.Kill(ctx)
	case "stop":
		return s.Halt(ctx)
	case "start":
		return s.Start(ctx)
	case "restart":
		if err := s.Kill(ctx); err != nil {
			return err
		}
		return s.Start(ctx)
	}
	return fmt.Errorf("unknown process action %q", action)
}

// restore starts again every managed server a process-fault scenario left
// down, so its cleanup and the next scenario find the servers as they were.
func (w *World) restore(ctx context.Context, iso *isolation) error {
	var errs []error
	if w.redis != nil {
		errs = append(errs, w.redis.Start(ctx))
	}
	if w.natsSrv != nil {
		errs = append(errs, control{w, broker.NATS}.Broker(ctx, "start"))
	}
	for i, pg := range w.pgs {
		if pg != nil {
			errs = append(errs, w.startPG(ctx, i))
			iso.pools[i].Reset()
		}
	}
	return errors.Join(errs...)
}
