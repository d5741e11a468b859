package natsproxy

import (
	"cmp"
	"encoding/json"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
	nproxy "github.com/outboxdrill/runner/proxy/nats"
)

// Crossings are the operations runner explore maps, counted as the
// proxy's triggers count them (proxy/nats Trigger.matches): publish, a
// JetStream publish (both boundaries count every one; its reply can be
// held when it is a PubAck: "ok", "error" for a PubAck error, "none" when
// none came); deliver, a pull request (request(deliver) only) or a
// delivery, a MSG with a $JS.ACK reply subject (reply(deliver) only:
// "entries"); ack, +ACK or +NXT (both count it; reply(ack) can strike only
// an ack with a reply subject, nats.js's ackAck: "ok" when its answer
// came); -NAK, +WPI and +TERM by their own names, as an ack. The +ACK
// of a +NXT is counted as ack, not as +NXT. CONNECT, INFO, SUB,
// PING and the rest are connection setup and left out.
func (x *proxy) Crossings() []fault.Crossing {
	es := x.p.Events()
	answer := map[int64]nproxy.Event{} // a publish's reply, by the publish's Seq
	msgOn := map[string]bool{}         // the subjects a MSG came on, for the answers to acks
	for _, e := range es {
		switch {
		case e.Kind == nproxy.KindReply:
			answer[e.Answers] = e
		case e.Op == "MSG" || e.Op == "HMSG":
			msgOn[e.Subject] = true
		}
	}
	var out []fault.Crossing
	for _, e := range es {
		c := fault.Crossing{Link: fault.Broker, Fault: e.Fault, At: e.At}
		switch e.Kind {
		case nproxy.KindPublish:
			c.Op, c.Reply = nproxy.OpPublish, "none"
			if a, ok := answer[e.Seq]; ok {
				c.Fault = cmp.Or(c.Fault, a.Fault) // a reply(publish) strikes at the PubAck
				var pa struct {
					Stream string          `json:"stream"`
					Error  json.RawMessage `json:"error"`
				}
				switch {
				case json.Unmarshal(a.Data, &pa) != nil || pa.Stream == "" && len(pa.Error) == 0:
					c.Reply, c.Response = "ok", fault.Counted // no PubAck: reply(publish) fails unclassifiable
				case len(pa.Error) > 0 && string(pa.Error) != "null":
					c.Reply = "error"
				default:
					c.Reply = "ok"
				}
			}
			if e.Dropped {
				c.Reply = "none"
			}
		case nproxy.KindPull:
			c.Op, c.Response = nproxy.OpDeliver, fault.Passed
		case nproxy.KindDelivery:
			c.Op, c.Reply, c.Request = nproxy.OpDeliver, "entries", fault.Passed
		case nproxy.KindAck:
			k := ackKind(e.Data)
			switch k {
			case nproxy.OpAckAck, nproxy.OpAckNext:
				c.Op = nproxy.OpAck
			case "":
				continue // a payload the server ignores: no trigger counts it
			default:
				c.Op = k
			}
			a, paired := answer[e.Seq] // paired when a trigger held its answer
			switch {
			case e.Reply == "":
				c.Response = fault.Counted // the server answers nothing to hold
			case paired:
				c.Reply, c.Fault = "ok", cmp.Or(c.Fault, a.Fault)
			case msgOn[e.Reply]:
				c.Reply = "ok"
			default:
				c.Reply = "none"
			}
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// ackKind reads an ack's payload as proxy/nats does (and the server).
func ackKind(data []byte) string {
	s := string(data)
	switch {
	case s == "" || s == nproxy.OpAckAck || s == "+OK":
		return nproxy.OpAckAck
	case s == nproxy.OpAckWPI:
		return nproxy.OpAckWPI
	}
	for _, k := range []string{nproxy.OpAckNext, nproxy.OpAckNak, nproxy.OpAckTerm} {
		if strings.HasPrefix(s, k) {
			return k
		}
	}
	return ""
}
