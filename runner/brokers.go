package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// ParseBrokers reads --broker: a name, a comma-separated list, or "all".
// An empty value is an error: it would otherwise mean the default, Redis,
// and hide a variable that expanded to nothing (--broker "$BROKERS").
func ParseBrokers(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--broker: empty; want %s, all, or a list such as redis,nats", strings.Join(broker.Names, ", "))
	}
	if s == "all" {
		return slices.Clone(broker.Names), nil
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		if !slices.Contains(broker.Names, b) {
			return nil, fmt.Errorf("--broker: unknown broker %q%s; one of: %s, or all", b, diag.Suggest(b, broker.Names), strings.Join(broker.Names, ", "))
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
	New(ctx context.Context, key string, sc *scenario.Scenario) (broker.Broker, error)
	// Server is the runner's own server process, for process faults; nil,
	// with the reason, when there is none the runner may crash.
	Server() (proc, string)
	// Ready returns once the connection works again after a (re)start.
	Ready(ctx context.Context) error
	// Hints tell how to inspect the stream or queues named key (--keep).
	Hints(key string) []string
	// Lease marks run runID live on the server until release, or until the
	// run dies: Clean leaves a live run's objects alone.
	Lease(ctx context.Context, runID string) (release func(context.Context) error, err error)
	// Clean removes what runs left on the server: only objects whose names
	// have the exact shape the runner gives, of runs whose lease is not live.
	Clean(ctx context.Context) (Cleaned, error)
}

// brokerKinds connect to a broker's server at url, or start a throwaway one
// when url is "". Each broker kind adds itself from its own file
// (broker_redis.go, broker_nats.go, broker_rabbitmq.go).
var brokerKinds = map[string]func(ctx context.Context, w *World, url string, p *Params) (brokerConn, error){}

// brokerURL is the server a flag names for broker b ("" for the runner's own).
func brokerURL(p *Params, b string) string {
	return map[string]string{broker.Redis: p.RedisURL, broker.NATS: p.NATSURL, broker.RabbitMQ: p.RabbitMQURL, broker.Kafka: p.KafkaURL}[b]
}

// AllGiven reports whether every server of the run is given by URL, none
// the runner's own (what --keep needs: its own servers go when it exits).
func AllGiven(p *Params) bool {
	for _, b := range p.brokers() {
		if brokerURL(p, b) == "" {
			return false
		}
	}
	return p.PGURL != ""
}

// openBroker connects to (or starts) broker b of the run.
func (w *World) openBroker(ctx context.Context, p *Params, b string) error {
	open, ok := brokerKinds[b]
	if !ok {
		return fmt.Errorf("unknown broker %q", b)
	}
	conn, err := open(ctx, w, brokerURL(p, b), p)
	if err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	w.connsMu.Lock()
	w.conns[b] = conn
	w.connsMu.Unlock()
	return nil
}

// newBroker is scenario sc's own stream (or queues) on broker b, named key.
func (w *World) newBroker(ctx context.Context, b, key string, sc *scenario.Scenario) (broker.Broker, error) {
	conn, ok := w.conns[b]
	if !ok {
		return nil, fmt.Errorf("broker %s was not opened for this run", b)
	}
	return conn.New(ctx, key, sc)
}

// lacking is the skip reason of a scenario whose steps need what broker b
// lacks, each with the broker's documented reason, or "".
func lacking(sc *scenario.Scenario, b string, caps broker.Capabilities) string {
	var miss, why []string
	for _, c := range sc.Needs(b) {
		if !caps.Has(c) {
			miss = append(miss, string(c))
			if w := broker.WhyNot(b, c); w != "" {
				why = append(why, w)
			}
		}
	}
	if len(miss) == 0 {
		return ""
	}
	s := fmt.Sprintf("needs %s, which %s does not have", strings.Join(miss, ", "), b)
	if len(why) > 0 {
		s += ": " + strings.Join(why, "; ")
	}
	return s
}

// control is the process control of one scenario: its broker and the
// run's PostgreSQL servers.
type control struct {
	w      *World
	broker string
}

func (c control) Cannot(s steps.Server) string {
	switch s {
	case steps.ProducerServer, steps.ConsumerServer:
		if c.w.pgs[pgSide(s)] == nil {
			return notOurs("PostgreSQL", "--pg")
		}
		return ""
	case steps.BrokerServer:
		_, why := c.w.conns[c.broker].Server()
		return why
	}
	return fmt.Sprintf("the runner knows no server %q", s)
}

// pgSide is the index of a PostgreSQL server in World.pgs.
func pgSide(s steps.Server) int {
	if s == steps.ConsumerServer {
		return consumerSide
	}
	return producerSide
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

func (c control) Postgres(ctx context.Context, s steps.Server, action string) error {
	return c.w.Postgres(ctx, s, action)
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
