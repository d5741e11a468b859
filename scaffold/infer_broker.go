package scaffold

import (
	"fmt"
	"github.com/outboxdrill/runner/proxy/fault"
	"strings"
)

// stream maps the fields of the relay's publish (Redis), and checks it
// went where the scenario's consumer reads: ${destination}.
func (x *inference) stream() bool {
	p := x.pub
	if dest := x.obs.told["destination"]; dest != "" && p.Dest != dest {
		return x.problemf("the relay published the probe to %q, not to the scenario's own %q: hand it ${destination} (or ${stream}, ${topic}, ${subject}, ${exchange}: its broker's name for it) where it reads where to publish, e.g. STREAM=${stream}", p.Dest, dest)
	}
	if p.Fields == nil { // the wire's own place (a record key, a header, a property): no fields to name
		if x.idField != "" {
			return x.problemf("the relay's %s carried the probe's id in its header %q, not where the runner looks on %s (its own place): write stream: {event_id: %s, payload: HEADER} naming the header that carries the payload", p.Op, x.idField, x.broker, x.idField)
		}
		x.brokersComment = fmt.Sprintf("seen: the relay's publish (%s, to ${destination}) carried the probe's id where the runner looks on %s: no stream: needed", p.Op, x.broker)
		return true
	}
	var payloads []string
	for _, name := range fieldOrder(p) {
		if name != "" && sameJSON(p.fields[name], x.f.payloadJSON) {
			payloads = append(payloads, name)
		}
	}
	if len(payloads) == 0 {
		return x.problemf("the relay's %s carried the probe's id in field %q but its payload (%s's %s, the event's JSON) in no field: the runner reads the event from one field (stream.payload); fields: %s",
			p.Op, x.idField, x.f.outbox.Table.Ref(), x.f.payload.Name, describeMsgs([]*wireMsg{p}))
	}
	k := &Key{Name: "stream", Value: flow("event_id", x.idField, "payload", payloads[0])}
	k.Comments = append(k.Comments, fmt.Sprintf("seen: the relay's publish (%s) to ${stream}: field %s = the probe's %s (%s), %s = its %s", p.Op, x.idField, x.f.eventID.Name, show(x.id), payloads[0], x.f.payload.Name))
	for _, name := range fieldOrder(p) {
		if name != "" && name != x.idField && p.fields[name] == x.id {
			k.Alternatives = append(k.Alternatives, flow("event_id", name, "payload", payloads[0])+"   (that field carried the id too)")
		}
	}
	for _, name := range payloads[1:] {
		k.Alternatives = append(k.Alternatives, flow("event_id", x.idField, "payload", name)+"   (that field carried the payload too)")
	}
	x.plan.set(k)
	return true
}

// delivery finds the consumer's delivery of the probe, and says which
// group it read with and when it acked.
func (x *inference) delivery() bool {
	for _, d := range x.obs.dels {
		if d.service == "consumer" && d.fields[x.idField] == x.id && (d.Dest == "" || d.Dest == x.pub.Dest) {
			x.del = d
			break
		}
	}
	if x.del == nil {
		hint := " (a consumer that creates its group at the stream's end, $, after the relay published reads nothing older: create it at its start, 0)"
		return x.problemf("the consumer was never handed the probe%s: is it told ${broker.url} and where to read (${stream}, ${group}, ${subject}, ${queue} …)? %s", hint, x.said("consumer"))
	}
	svc := x.service("consumer")
	seen := fmt.Sprintf("seen: it was handed the probe by %s", x.del.Op)
	if g := x.del.Group; g != "" {
		name, want := "${group}", x.obs.told["group"]
		if want == "" {
			name, want = "${queue}", x.obs.told["queue"] // RabbitMQ: a queue per consumer id
		}
		seen += fmt.Sprintf(" as group %s", g)
		switch {
		case want == "":
		case g != want:
			x.notes = append(x.notes, fmt.Sprintf("the consumer reads as group %q, not the scenario's %s %q: stream.lag and the history read %s (hand it that placeholder, e.g. GROUP=%s)", g, name, want, name, name))
		default:
			seen += " (= " + name + ")"
		}
	}
	svc.Comments = append(svc.Comments, seen)
	return true
}

// acked says when the consumer acked, against its commit of the inbox
// row (ack-first is a note).
func (x *inference) acked() string {
	ack := x.crossing("consumer", "broker", x.del.At, func(c fault.Crossing) bool { return isAck(c.Op) })
	switch {
	case ack == nil && x.del.Acked:
		return "acked"
	case ack == nil:
		return "not seen acking it"
	case x.inboxAt.IsZero():
		return "acked it (" + ack.Op + ")"
	case ack.At.Before(x.inboxAt):
		x.notes = append(x.notes, fmt.Sprintf("the consumer acked the probe (%s) %s BEFORE its inbox commit: when that commit fails the event is lost (the seed-2 drill shows it)", ack.Op, since(ack.At, x.inboxAt)))
		return fmt.Sprintf("acked it (%s) %s before its commit", ack.Op, since(ack.At, x.inboxAt))
	}
	return fmt.Sprintf("acked it (%s) %s after its commit", ack.Op, since(x.inboxAt, ack.At))
}

func isAck(op string) bool {
	switch strings.ToLower(op) {
	case "xack", "ack", "basic.ack", "offsetcommit", "txnoffsetcommit", "+ack":
		return true
	}
	return false
}

// service is the plan's service named name.
func (x *inference) service(name string) *ServicePlan {
	for _, s := range x.plan.Services {
		if s.Name == name {
			return s
		}
	}
	panic("scaffold: no service " + name)
}
