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
	"github.com/redis/go-redis/v9"

	"outboxdrill/broker"
	jsbroker "outboxdrill/broker/jetstream"
	"outboxdrill/broker/rabbitmq"
	"outboxdrill/broker/redisstream"
	"outboxdrill/history"
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

// brokerConn is the run's connection to one kind of broker. A new broker
// takes a package implementing broker.Broker (with its capability list) and
// one brokerConn, registered in brokerKinds.
type brokerConn interface {
	// New is scenario sc's own stream or queues, named key.
	New(ctx context.Context, key string, sc *Scenario) (broker.Broker, error)
	// Server is the runner's own server process, for process faults; nil,
	// with the reason, when there is none the runner may crash.
	Server() (proc, string)
	// Ready returns once the connection works again after a (re)start.
	Ready(ctx context.Context) error
}

// brokerKinds connect to a broker's server at url, or start a throwaway one
// when url is "". Redis is opened with PostgreSQL (startServers).
var brokerKinds = map[string]func(ctx context.Context, w *World, url string, p *Params) (brokerConn, error){
	broker.NATS:     openNATS,
	broker.RabbitMQ: openRabbitMQ,
}

// brokerURL is the server a flag names for broker b ("" for the runner's own).
func brokerURL(p *Params, b string) string {
	return map[string]string{broker.Redis: p.RedisURL, broker.NATS: p.NATSURL, broker.RabbitMQ: p.RabbitMQURL}[b]
}

// AllGiven reports whether every server of the run is given by URL, none
// the runner's own (what --keep needs: its own servers go when it exits).
func AllGiven(p *Params) bool {
	brokers := p.Brokers
	if len(brokers) == 0 {
		brokers = []string{broker.Redis}
	}
	for _, b := range brokers {
		if brokerURL(p, b) == "" {
			return false
		}
	}
	return p.PGURL != ""
}

// startBrokers connects to (or starts) every selected broker but Redis.
func (w *World) startBrokers(ctx context.Context, p *Params) error {
	for _, b := range p.Brokers {
		open, ok := brokerKinds[b]
		if !ok {
			continue
		}
		conn, err := open(ctx, w, brokerURL(p, b), p)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		w.connsMu.Lock()
		w.conns[b] = conn
		w.connsMu.Unlock()
	}
	return nil
}

// redisConn is the run's Redis client, and its server when the runner's own.
type redisConn struct {
	rdb *redis.Client
	srv *servers.Redis
}

func (c redisConn) New(_ context.Context, key string, _ *Scenario) (broker.Broker, error) {
	return redisstream.New(c.rdb, key), nil
}

func (c redisConn) Server() (proc, string) {
	if c.srv == nil {
		return nil, notOurs("Redis", "--redis")
	}
	return c.srv, ""
}

func (c redisConn) Ready(context.Context) error { return nil } // go-redis dials anew

// natsConn is the run's NATS connection, and its server when the runner's own.
type natsConn struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *servers.NATS
}

// openNATS connects for drills: a server a step killed is the answer, not a
// blip to wait out, so nothing is buffered while disconnected and
// reconnects are quick.
func openNATS(ctx context.Context, w *World, url string, p *Params) (brokerConn, error) {
	var c natsConn
	if url == "" {
		srv, err := servers.StartNATS(ctx, servers.NATSOptions{})
		if err != nil {
			return nil, err
		}
		w.undo.add(srv.Discard)
		c.srv, url = srv, srv.URL()
		p.logf("started NATS pid %d at %s in %s", srv.PID(), url, srv.Dir)
	}
	nc, err := nats.Connect(url, nats.Name("outboxdrill"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	w.undo.add(func(context.Context) error { nc.Close(); return nil })
	c.nc = nc
	c.js, err = jetstream.New(nc)
	return c, err
}

func (c natsConn) New(ctx context.Context, key string, sc *Scenario) (broker.Broker, error) {
	return jsbroker.New(ctx, c.js, key, natsOptions(sc))
}

func (c natsConn) Server() (proc, string) {
	if c.srv == nil {
		return nil, notOurs("NATS", "--nats")
	}
	return c.srv, ""
}

// Ready waits for the client's own reconnect.
func (c natsConn) Ready(ctx context.Context) error {
	for !c.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

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
		p.logf("started RabbitMQ pid %d at %s in %s", srv.PID(), url, srv.Dir)
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redact(url), err)
	}
	w.undo.add(func(context.Context) error { return conn.Close() })
	return rabbitConn{conn}, nil
}

// New declares a queue per consumer id the scenario names, before anything
// is published, as infrastructure-as-code would.
func (c rabbitConn) New(ctx context.Context, key string, sc *Scenario) (broker.Broker, error) {
	ids := sc.Consumers()
	if len(ids) == 0 {
		ids = []string{"accounting"}
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

// newBroker is scenario sc's own stream (or queues) on broker b, named key.
func (w *World) newBroker(ctx context.Context, b, key string, sc *Scenario) (broker.Broker, error) {
	conn, ok := w.conns[b]
	if !ok {
		return nil, fmt.Errorf("broker %s was not opened for this run", b)
	}
	return conn.New(ctx, key, sc)
}

// Needs lists what the scenario asks of broker b, from its steps'
// parameters and the checks that apply on b, in a stable order.
func (sc *Scenario) Needs(b string) []broker.Capability {
	set := map[broker.Capability]bool{}
	for _, c := range sc.Steps {
		for _, n := range c.Needs(b) {
			set[n] = true
		}
	}
	// Loss is judged on what the broker still holds: without its entry log
	// a declared loss could not be shown, and must not fail for that.
	set[broker.EntryLog] = set[broker.EntryLog] || slices.Contains(sc.Violations(b), history.Lost)
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
	for _, c := range sc.Needs(b) {
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

func (c control) Cannot(step string) string {
	switch {
	case step == "producer_db" && c.w.pgs[producerSide] == nil, step == "consumer_db" && c.w.pgs[consumerSide] == nil:
		return notOurs("PostgreSQL", "--pg")
	case step != "broker":
		return ""
	}
	_, why := c.w.conns[c.broker].Server()
	return why
}

// notOurs is why a process fault cannot run on a server given by flag.
func notOurs(what, flag string) string {
	return fmt.Sprintf("needs the runner's own %s process; the runner never crashes or stops one given with %s", what, flag)
}

func (c control) Broker(ctx context.Context, action string) error {
	conn := c.w.conns[c.broker]
	srv, why := conn.Server()
	if srv == nil {
		return errors.New(why)
	}
	if err := process(ctx, srv, action); err != nil || action == "kill" || action == "stop" {
		return err
	}
	return conn.Ready(ctx)
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

// restoreTimeout bounds bringing the servers back after a process fault.
const restoreTimeout = time.Minute

// restore starts again every managed server a process-fault scenario left
// down, so its cleanup and the next scenario find the servers as they were.
func (w *World) restore(ctx context.Context, iso *isolation) error {
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	var errs []error
	for _, conn := range w.conns {
		if srv, _ := conn.Server(); srv != nil {
			if err := srv.Start(ctx); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, conn.Ready(ctx))
		}
	}
	for i, pg := range w.pgs {
		if pg != nil {
			errs = append(errs, w.startPG(ctx, i))
			iso.pools[i].Reset()
		}
	}
	return errors.Join(errs...)
}
