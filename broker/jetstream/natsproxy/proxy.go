// Package natsproxy is NATS JetStream's protocol proxy as the runner uses
// it (broker.ProxyKind): a proxy/nats proxy in front of each service's NATS
// connection, its faults named by the neutral operations or JetStream's
// own, and what crossed it read as the history's wire and explore's
// crossings.
package natsproxy

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

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

// Operations are the neutral ones, then the proxy's own.
func (Kind) Operations() []string { return nproxy.Operations() }

// Operation is op when the proxy names it so, else why not, with the
// closest of its operations.
func (Kind) Operation(op string) (string, error) {
	return fault.ListedOperation(op, nproxy.Operations(), nproxy.UnknownOperation)
}

// Compile is t as the proxy arms it, checked.
func (Kind) Compile(t fault.Trigger) (any, error) { return fault.Native(native(t).Compile()) }

func native(t fault.Trigger) nproxy.Trigger {
	n := nproxy.Trigger{Boundary: t.Boundary, Op: t.Filter.Command, Subject: t.Filter.Subject, Nth: t.Nth, Action: t.Action}
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
	p, err := nproxy.ListenWith(up, nproxy.DefaultLimits())
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

var (
	_ broker.Patient = (*proxy)(nil)
	_ broker.Idler   = (*proxy)(nil)
)

func (x *proxy) URL() string     { return x.url }
func (x *proxy) Address() string { return x.p.Addr() }
func (x *proxy) Close()          { x.p.Close() }

func (x *proxy) Arm(c fault.Compiled) (broker.Strike, error) {
	n, ok := c.Native.(nproxy.Checked)
	if !ok {
		return nil, fmt.Errorf("%s: not compiled for the NATS proxy", c.On())
	}
	return x.p.ArmChecked(n, c.Action.Kill)
}

// notJudged is what a JetStream wire cannot support.
var notJudged = map[string]string{
	"stranded": "JetStream redelivers a message its consumer did not acknowledge within the consumer's AckWait to whichever client pulls next (https://docs.nats.io/nats-concepts/jetstream/consumers#ackwait), so no message is stranded with a dead worker",
}

// Wire maps the stored publishes (a PubAck naming a stream and sequence;
// one JetStream dropped as a duplicate of its Nats-Msg-Id is no publish),
// the deliveries ($JS.ACK-replied messages) and their acks: +ACK, and
// +TERM (the consumer told JetStream never to redeliver it), each acking
// the delivery its subject names. A delivery of a consumer whose
// ack_policy the server stated as none, in a reply that crossed the
// proxy, is Acked as it is delivered; one of a consumer the proxy saw no
// such reply of is judged by its acks alone. An entry's id is its stream sequence;
// a delivery's group its consumer (the durable's name). The event id is
// the header the stream: mapping names, else event-id, else Nats-Msg-Id;
// the payload the header it names, else the data.
func (x *proxy) Wire(m broker.WireMap) broker.Wire {
	pubs, dels, acks := x.p.History()
	es := x.p.Events() // after History: every operation it read is there
	pass := broker.PassesWithCopies(len(es), func(i int) time.Time { return es[i].At }, func(i int) bool { return es[i].Fault != "" }, func(i int) bool { return es[i].Copy })
	w := broker.Wire{NotJudged: notJudged, EventIDFrom: from(m.EventID, "the event-id header, else Nats-Msg-Id")}
	if n := x.p.Unpaired(); n > 0 {
		// Replies passed on unpaired: publishes missing from the history.
		w.NotJudged = maps.Clone(notJudged)
		for _, inv := range []string{"acked_without_effect", "double_published", "lost"} {
			w.NotJudged[inv] = fmt.Sprintf("the NATS proxy passed on %d repl(ies) without pairing them with their publish (over its cap of requests awaiting a reply), so the history from the wire lacks those publishes", n)
		}
	}
	for _, p := range pubs {
		if p.Duplicate {
			continue
		}
		op := "PubAck"
		if p.Copy { // the trace says whose it was
			op = "PubAck (of the drill's duplicate of the publish before)"
		}
		w.Publishes = append(w.Publishes, broker.WireMsg{At: p.At, Op: op, EntryID: strconv.FormatUint(p.Seq, 10), Dest: p.Subject,
			EventID: eventID(p.Header, m.EventID), Payload: payload(p.Header, m.Payload, p.Data), Pass: pass[p.At]})
	}
	acked := map[string]bool{}
	for _, a := range acks {
		if a.Kind == "+ACK" || a.Kind == "+TERM" {
			acked[a.AckSubject] = true
		}
	}
	ackNone := x.ackNone()
	for _, d := range dels {
		none := ackNone[[2]string{d.Stream, d.Consumer}]
		if d.Dropped && !none || d.StreamSeq == 0 {
			continue // never reached the client (JetStream delivers it again), or not JetStream's
		}
		w.Deliveries = append(w.Deliveries, broker.WireMsg{At: d.At, Op: deliveryOp(d, none), EntryID: strconv.FormatUint(d.StreamSeq, 10), Dest: d.Subject, Group: d.Consumer,
			EventID: eventID(d.Header, m.EventID), Payload: payload(d.Header, m.Payload, d.Data), Acked: acked[d.AckSubject] || none, Pass: pass[d.At]})
	}
	w.Dropped = x.p.Dropped()
	return w
}

// ackNone are the consumers (stream, name) the server said take no acks
// (AckNone): JetStream takes a message as acknowledged as it delivers it
// (https://docs.nats.io/nats-concepts/jetstream/consumers#ackpolicy), so
// it never comes again, even one a fault kept from the client.
func (x *proxy) ackNone() map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, c := range x.p.Consumers() {
		if c.AckPolicy == "none" {
			out[[2]string{c.Stream, c.Name}] = true
		}
	}
	return out
}

func deliveryOp(d nproxy.Delivery, ackNone bool) string {
	switch {
	case ackNone && d.Dropped:
		return "MSG (AckNone, kept from the client by the drill)"
	case ackNone:
		return "MSG (AckNone)"
	}
	return "MSG"
}

// Waits are the AckWaits the server stated for the consumers the
// services created or looked up through the proxy: it delivers a message
// again only once its AckWait ran out. An AckNone consumer has none.
func (x *proxy) Waits() []broker.Wait {
	var out []broker.Wait
	for _, c := range x.p.Consumers() {
		if c.AckPolicy != "none" && c.AckWait > 0 {
			out = append(out, broker.Wait{What: fmt.Sprintf("JetStream consumer %s of stream %s: its AckWait (consumer %s reply)", c.Name, c.Stream, c.From), For: c.AckWait})
		}
	}
	return out
}

// from says where the event id is looked for: the mapping's header first.
func from(header, rest string) string {
	if header != "" {
		return fmt.Sprintf("the header %q (the system file's stream.event_id), else %s", header, rest)
	}
	return rest
}

func eventID(h nproxy.Header, name string) string {
	for _, k := range []string{name, "event-id", "Nats-Msg-Id"} {
		if v := h.Get(k); k != "" && v != "" {
			return v
		}
	}
	return ""
}

func payload(h nproxy.Header, name string, data []byte) string {
	if v := h.Get(name); name != "" && v != "" {
		return v
	}
	return string(data)
}

// IdlePoll is when the service was last known to have asked JetStream for
// new work holding none, and got none (proxy/nats's rule: a pull sent, or
// a pull's 404, 408 or idle heartbeat, with every delivery it was handed
// acked, naked or termed, and no delivery since): now, while it still
// waits so (broker.Idler).
func (x *proxy) IdlePoll() time.Time { return x.p.IdlePoll() }

// Dropped is how many events the proxy's record left out, full.
func (x *proxy) Dropped() int64 { return x.p.Dropped() }
