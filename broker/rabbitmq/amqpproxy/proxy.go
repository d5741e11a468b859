// Package amqpproxy is RabbitMQ's protocol proxy as the runner uses it
// (broker.ProxyKind): a proxy/amqp proxy in front of each service's AMQP
// connection, its faults named by the neutral operations or AMQP methods,
// and what crossed it read as the history's wire and explore's crossings.
package amqpproxy

import (
	"fmt"
	"time"

	"github.com/outboxdrill/runner/broker"
	aproxy "github.com/outboxdrill/runner/proxy/amqp"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Kind is RabbitMQ's protocol proxy (proxy/amqp): faults at publish
// (its publisher confirm: reply(publish) needs a channel in confirm
// mode), deliver (basic.deliver, basic.get-ok), ack (basic.ack) and every
// AMQP method, filtered by exchange, routing_key, queue.
type Kind struct{}

// Operations are the neutral ones, then the proxy's own.
func (Kind) Operations() []string { return aproxy.Operations() }

// Operation is op when the proxy names it so, else why not, with the
// closest of its operations.
func (Kind) Operation(op string) (string, error) {
	return fault.ListedOperation(op, aproxy.Operations(), aproxy.UnknownOperation)
}

// Compile is t as the proxy arms it, checked.
func (Kind) Compile(t fault.Trigger) (any, error) { return fault.Native(native(t).Compile()) }

func native(t fault.Trigger) aproxy.Trigger {
	a := aproxy.Trigger{Boundary: t.Boundary, Op: t.Filter.Command, Exchange: t.Filter.Exchange, RoutingKey: t.Filter.RoutingKey, Queue: t.Filter.Queue, Nth: t.Nth, Action: t.Action}
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
	p, err := aproxy.ListenWith(up, aproxy.DefaultLimits())
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

func (x *proxy) Arm(c fault.Compiled) (broker.Strike, error) {
	n, ok := c.Native.(aproxy.Checked)
	if !ok {
		return nil, fmt.Errorf("%s: not compiled for the RabbitMQ proxy", c.On())
	}
	return x.p.ArmChecked(n, c.Action.Kill)
}

// notJudged is what an AMQP wire cannot support.
var notJudged = map[string]string{
	"stranded": "RabbitMQ requeues every message a channel holds unacknowledged when the channel or its connection closes (https://www.rabbitmq.com/docs/confirms#automatic-requeueing), so no message is stranded with a dead worker; one a live consumer holds is not counted over AMQP (https://www.rabbitmq.com/amqp-0-9-1-reference#queue.declare-ok)",
}

// Wire maps the publishes the broker took (took),
// the deliveries and their settlements. A message carries no id the
// broker gave it, so entries are counted, not followed (broker.Wire's
// Copies): a delivery is Acked when a basic.ack settled it, or a
// basic.nack or basic.reject without requeue (the broker drops or
// dead-letters it: https://www.rabbitmq.com/docs/confirms#consumer-nacks-requeue),
// outside a transaction or in a committed one; a delivery to a consumer
// or basic.get that asked for no acks is Acked as it is sent. A
// delivery's group is its queue. The event id is the header the stream: mapping names, else the
// message_id property; the payload the header it names, else the body.
func (x *proxy) Wire(m broker.WireMap) broker.Wire {
	pubs, dels, acks := x.p.History()
	es := x.p.Events() // after History: every method it read is there
	pass := broker.PassesWithCopies(len(es), func(i int) time.Time { return es[i].At }, func(i int) bool { return es[i].Fault != "" }, func(i int) bool { return es[i].Copy })
	w := broker.Wire{NotJudged: notJudged, Copies: true, EventIDFrom: "the message_id property"}
	if m.EventID != "" {
		w.EventIDFrom = fmt.Sprintf("the header %q (the system file's stream.event_id), else the message_id property", m.EventID)
	}
	for _, p := range pubs {
		if !took(p) {
			continue
		}
		op := "basic.publish"
		if p.Copy { // the trace says whose it was
			op = "basic.publish (the drill's duplicate of the one before)"
		}
		w.Publishes = append(w.Publishes, broker.WireMsg{At: p.At, Op: op, Dest: p.Exchange,
			EventID: eventID(p.Properties, m.EventID), Payload: payload(p.Properties, m.Payload, p.Body), Pass: pass[p.At]})
	}
	settled := map[int]bool{}
	for _, a := range acks {
		if a.Tx && a.Outcome != "committed" || a.Method != "basic.ack" && a.Requeue {
			continue
		}
		for _, i := range a.Deliveries {
			settled[i] = true
		}
	}
	for i, d := range dels {
		if d.Dropped && !d.NoAck {
			continue // the channel closed on it (the broker requeues it), or it is held unacked
		}
		if d.Copy {
			continue // the wire counts the broker's copies: the drill's second hand-out settled none
		}
		w.Deliveries = append(w.Deliveries, broker.WireMsg{At: d.At, Op: deliveryOp(d), Dest: d.Exchange, Group: d.Queue,
			EventID: eventID(d.Properties, m.EventID), Payload: payload(d.Properties, m.Payload, d.Body), Acked: settled[i] || d.NoAck, Pass: pass[d.At]})
	}
	w.Dropped = x.p.Dropped()
	return w
}

// deliveryOp names a delivery's method, and says when its consumer took
// no acks: RabbitMQ counts such a delivery acknowledged as it sends it
// (https://www.rabbitmq.com/docs/confirms#acknowledgement-modes), so it
// settled its copy then, even one a fault kept from the client.
func deliveryOp(d aproxy.Delivery) string {
	switch {
	case d.NoAck && d.Dropped:
		return d.Method + " (no-ack, kept from the client by the drill)"
	case d.NoAck:
		return d.Method + " (no-ack)"
	}
	return d.Method
}

// took reports whether the broker took p: confirmed, committed, or sent
// on a channel with neither (the broker says nothing there; nothing
// refused it). A confirm that never came leaves it unknown: not counted.
func took(p aproxy.Publish) bool {
	switch {
	case p.Tx:
		return p.Outcome == "committed"
	case p.Tag > 0:
		return p.Outcome == "ack"
	}
	return true
}

func eventID(p aproxy.Properties, header string) string {
	if v, ok := p.Headers[header].(string); header != "" && ok && v != "" {
		return v
	}
	return p.MessageID
}

func payload(p aproxy.Properties, header string, body []byte) string {
	if v, ok := p.Headers[header].(string); header != "" && ok {
		return v
	}
	return string(body)
}

// Dropped is how many events the proxy's record left out, full.
func (x *proxy) Dropped() int64 { return x.p.Dropped() }
