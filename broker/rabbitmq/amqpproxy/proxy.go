package amqpproxy

import (
	"fmt"

	"github.com/outboxdrill/runner/broker"
	aproxy "github.com/outboxdrill/runner/proxy/amqp"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Kind is RabbitMQ's protocol proxy (proxy/amqp): faults at publish
// (its publisher confirm: reply(publish) needs a channel in confirm
// mode), deliver (basic.deliver, basic.get-ok), ack (basic.ack) and every
// AMQP method, filtered by exchange, routing_key, queue.
type Kind struct{}

func (Kind) Operations() []string        { return aproxy.Operations() }
func (Kind) Check(t fault.Trigger) error { return native(t).Check() }

func native(t fault.Trigger) aproxy.Trigger {
	a := aproxy.Trigger{Boundary: aproxy.Reply, Op: t.Filter.Command, Exchange: t.Filter.Exchange, RoutingKey: t.Filter.RoutingKey, Queue: t.Filter.Queue, Nth: t.Nth, Action: t.Action}
	if t.Boundary == fault.Request {
		a.Boundary = aproxy.Request
	}
	if f := t.Filter; f.Topic != "" || f.Group != "" || f.Subject != "" {
		a.Op = "" // Check: AMQP filters by exchange, routing key, queue
	}
	return a
}

func (Kind) Listen(url string) (broker.Proxy, error) {
	up, err := broker.FirstHost(url, "5672")
	if err != nil {
		return nil, err
	}
	p, err := aproxy.Listen(up)
	if err != nil {
		return nil, err
	}
	via, err := broker.ViaURL(url, p.Addr())
	if err != nil {
		p.Close()
		return nil, err
	}
	return &proxy{p: p, url: via}, nil
}

type proxy struct {
	p   *aproxy.Proxy
	url string // carries the password: the runner redacts it (redact.URLSecrets)
}

func (x *proxy) URL() string     { return x.url }
func (x *proxy) Address() string { return x.p.Addr() }
func (x *proxy) Close()          { x.p.Close() }

func (x *proxy) Arm(t fault.Trigger) (broker.Strike, error) {
	a := native(t)
	if err := a.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", t.On(), err)
	}
	return x.p.Arm(a)
}

// Wire: proxy/amqp records the publishes (with their confirms),
// deliveries and acks, but an AMQP publish carries no broker id to tie to
// the runner's entries (open work): the wire invariants stay not judged,
// saying so.
func (x *proxy) Wire(broker.WireMap) broker.Wire {
	why := "the RabbitMQ proxy records publishes, deliveries and acks, but they are not mapped into the history checker yet, so what the services did on the broker is not judged"
	return broker.Wire{NotJudged: map[string]string{"acked_without_effect": why, "double_published": why, "lost": why, "stranded": why}}
}
