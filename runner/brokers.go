package runner

import (
	"cmp"
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
	names := broker.Names()
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--broker: empty; want %s, all, or a list such as %s", strings.Join(names, ", "), BrokerExample())
	}
	if s == "all" {
		return names, nil
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		b = strings.TrimSpace(b)
		switch {
		case b == "":
			return nil, fmt.Errorf("--broker %q: an empty name in the list; want a list such as %s", s, BrokerExample())
		case b == "all":
			return nil, fmt.Errorf("--broker %q: all stands alone (it is every broker); or list them: %s", s, strings.Join(names, ","))
		}
		if !slices.Contains(names, b) {
			return nil, fmt.Errorf("--broker: unknown broker %q%s; one of: %s, or all", b, diag.Suggest(b, names), strings.Join(names, ", "))
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// BrokerChoices are --broker's values as help shows them:
// redis|nats|rabbitmq|kafka|all.
func BrokerChoices() string { return strings.Join(append(broker.Names(), "all"), "|") }

// BrokerExample is a --broker list as help shows one: redis,nats.
func BrokerExample() string {
	names := broker.Names()
	return strings.Join(names[:min(2, len(names))], ",")
}

// AllGiven reports whether every server of the run is given by URL, none
// the runner's own (what --keep needs: its own servers go when it exits).
func AllGiven(p *Params) bool {
	for _, b := range p.brokers() {
		if p.URLs[b] == "" {
			return false
		}
	}
	return p.PGURL != ""
}

// openBroker connects to broker b's server given by URL, or starts the
// runner's own, through its kind.
func (w *World) openBroker(ctx context.Context, p *Params, b string) error {
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
	p *Params
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
		if srv, why := c.w.brokerConns()[c.broker].Server(); srv == nil {
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
func (w *World) restore(ctx context.Context, iso *isolation, b string, brokerToo, pgToo bool) error {
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
