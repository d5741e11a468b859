package natsproxy

import (
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/fault"
	nproxy "github.com/outboxdrill/runner/proxy/nats"
)

// Kind is NATS's protocol proxy (proxy/nats): faults at publish
// (a PubAck), deliver (a $JS.ACK-replied MSG), ack ($JS.ACK +ACK) and the
// native operations, filtered by subject. Its request boundary of a
// publish cannot tell a JetStream publish from a core request until the
// PubAck comes.
type Kind struct{}

func (Kind) Operations() []string        { return nproxy.Operations() }
func (Kind) Check(t fault.Trigger) error { return native(t).Check() }

func native(t fault.Trigger) nproxy.Trigger {
	n := nproxy.Trigger{Boundary: nproxy.Reply, Op: t.Filter.Command, Subject: t.Filter.Subject, Nth: t.Nth, Action: t.Action}
	if t.Boundary == fault.Request {
		n.Boundary = nproxy.Request
	}
	if f := t.Filter; f.Topic != "" || f.Group != "" || f.Exchange != "" || f.RoutingKey != "" || f.Queue != "" {
		n.Op = "" // Check: NATS filters by subject only
	}
	return n
}

func (Kind) Listen(url string) (broker.Proxy, error) {
	up, err := broker.FirstHost(withScheme(url), "4222")
	if err != nil {
		return nil, err
	}
	p, err := nproxy.Listen(up)
	if err != nil {
		return nil, err
	}
	via, err := broker.ViaURL(withScheme(url), p.Addr())
	if err != nil {
		p.Close()
		return nil, err
	}
	return &proxy{p: p, url: via}, nil
}

// withScheme is a NATS URL list's first with its scheme (host:port alone
// means nats://).
func withScheme(url string) string {
	if !strings.Contains(url, "://") {
		return "nats://" + url
	}
	return url
}

type proxy struct {
	p   *nproxy.Proxy
	url string
}

func (x *proxy) URL() string     { return x.url }
func (x *proxy) Address() string { return x.p.Addr() }
func (x *proxy) Close()          { x.p.Close() }

func (x *proxy) Arm(t fault.Trigger) (broker.Strike, error) {
	n := native(t)
	if err := n.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", t.On(), err)
	}
	return x.p.Arm(n)
}

// Wire: proxy/nats records the publishes, deliveries and acks, but they
// are not yet tied to the runner's entry ids and groups (open work): the
// wire invariants stay not judged, saying so.
func (x *proxy) Wire(broker.WireMap) broker.Wire {
	why := "the NATS proxy records publishes, deliveries and acks, but they are not mapped into the history checker yet, so what the services did on the broker is not judged"
	return broker.Wire{NotJudged: map[string]string{"acked_without_effect": why, "double_published": why, "lost": why, "stranded": why}}
}
