package world

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

// openBroker connects to broker b's server given by URL, or starts the
// runner's own, through its kind.
func (w *World) openBroker(ctx context.Context, p *Config, b string) error {
	k, ok := broker.Lookup(b)
	if !ok {
		return fmt.Errorf("unknown broker %q", b)
	}
	h := worldHost{w, p, b}
	url := p.URLs[b]
	var own broker.Process
	if url == "" {
		var err error
		if url, own, err = k.Start(ctx, h); err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
	}
	h.SetURL(url)
	conn, err := k.Open(ctx, h, url, own)
	if err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	w.connsMu.Lock()
	w.conns[b] = conn
	w.connsMu.Unlock()
	return nil
}

// worldHost is the broker.Host a kind's Start and Open get: the run's undo
// list and log, and the World's records of broker b.
type worldHost struct {
	w *World
	p *Config
	b string
}

func (h worldHost) Defer(fn func(context.Context) error)     { h.w.undo.add(fn) }
func (h worldHost) DeferStop(fn func(context.Context) error) { h.w.undo.addStop(fn) }
func (h worldHost) Logf(format string, args ...any)          { h.p.logf(format, args...) }
func (h worldHost) SetURL(url string)                        { h.w.setBrokerURL(h.b, url) }
func (h worldHost) SetLabel(label string)                    { h.w.setBrokerLabel(h.b, label) }

// newBroker is scenario sc's own stream (or queues) on broker b, named key;
// sc nil: a pair taken without a scenario (soak, bench).
func (w *World) newBroker(ctx context.Context, b, key string, sc *scenario.Scenario) (broker.Broker, error) {
	conn, ok := w.brokerConns()[b]
	if !ok {
		return nil, fmt.Errorf("broker %s was not opened for this run", b)
	}
	var use broker.Scenario
	if sc != nil {
		use = sc.Broker(b)
	}
	if len(use.Consumers) == 0 {
		use.Consumers = []string{steps.DefaultConsumer}
	}
	return conn.New(ctx, key, use)
}

// control is the process control of one scenario: its broker and its
// set's PostgreSQL servers.
type control struct {
	w      *World
	broker string
	set    int
}

func (c control) Cannot(s steps.Server) string {
	switch s {
	case steps.ProducerServer, steps.ConsumerServer:
		if c.w.pgs[c.set*2+pgSide(s)] == nil {
			return notOurs("PostgreSQL", "--pg")
		}
		return ""
	case steps.BrokerServer:
		conn, ok := c.w.brokerConns()[c.broker]
		if !ok {
			return fmt.Sprintf("broker %s was not opened for this run", c.broker)
		}
		if srv, why := conn.Server(); srv == nil {
			return cmp.Or(why, notOursBroker(c.broker))
		}
		return ""
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

// notOursBroker is why a process fault cannot run on broker b's server,
// given by its flag.
func notOursBroker(b string) string {
	k, ok := broker.Lookup(b)
	if !ok {
		return fmt.Sprintf("the runner knows no broker %q", b)
	}
	return notOurs(k.Title, "--"+k.Flag)
}

func (c control) Broker(ctx context.Context, action string) error {
	conn := c.w.brokerConns()[c.broker]
	srv, why := conn.Server()
	if srv == nil {
		return errors.New(cmp.Or(why, notOursBroker(c.broker)))
	}
	if err := process(ctx, srv, action); err != nil {
		return err
	}
	if action == "kill" || action == "stop" {
		if d, ok := conn.(broker.Downer); ok {
			return d.Down(ctx)
		}
		return nil
	}
	return conn.Ready(ctx)
}

func (c control) Postgres(ctx context.Context, s steps.Server, action string) error {
	return c.w.Postgres(ctx, c.set, s, action)
}

// process applies a process fault to s.
func process(ctx context.Context, s broker.Process, action string) error {
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

// restore starts again every managed server a process-fault scenario on
// broker b left down, so its cleanup and the next scenario find the servers
// as they were: b's (when the scenario acted on it: brokerToo) and the
// PostgreSQL servers of the scenario's set (pgToo), whose restart its pools
// are told of. The other brokers' and the other set's jobs run on
// meanwhile: the scenario touched none of their servers.
func (w *World) Restore(ctx context.Context, iso *Isolation, b string, brokerToo, pgToo bool) error {
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	var errs []error
	if conn, ok := w.brokerConns()[b]; ok && brokerToo {
		if srv, _ := conn.Server(); srv != nil {
			if err := srv.Start(ctx); err != nil {
				errs = append(errs, err)
			} else {
				errs = append(errs, conn.Ready(ctx))
			}
		}
	}
	for side := range 2 {
		if pgToo && w.pgs[iso.srv(side)] != nil {
			errs = append(errs, w.startPG(ctx, iso.srv(side)))
			iso.pools[side].Reset()
		}
	}
	return errors.Join(errs...)
}
