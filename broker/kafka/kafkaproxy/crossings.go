package kafkaproxy

import (
	"slices"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
	kproxy "github.com/outboxdrill/runner/proxy/kafka"
)

// Crossings are the requests runner explore maps, counted as the proxy's
// triggers count them (proxy/kafka Trigger.matches), each at its
// response: publish, a Produce (both boundaries count it; "ok", "error"
// for a partition's error code, "none" when no response came; one not
// answered, acks=0, cannot be held: ""); deliver, a Fetch or ShareFetch
// (request(deliver) counts every one; reply(deliver) only a response that
// handed out records, "entries"; one that did not is an idle poll,
// "empty", or "error"); ack, an OffsetCommit, TxnOffsetCommit,
// ShareAcknowledge or a ShareFetch that accepts records (both count it);
// EndTxn by its own name. Metadata, ApiVersions, the group protocol and
// the rest are connection and group setup, left out.
func (x *proxy) Crossings() []fault.Crossing {
	var out []fault.Crossing
	for _, e := range x.p.Events() {
		c := fault.Crossing{Link: fault.Broker, Fault: e.Fault, At: e.At, Reply: reply(e)}
		switch e.API {
		case "Produce":
			c.Op = kproxy.OpPublish
			if !e.Answered && !e.Dropped {
				c.Reply, c.Response = "", fault.Counted // acks=0: no response to hold
			}
		case "Fetch", "ShareFetch":
			c.Op = kproxy.OpDeliver
			switch {
			case len(e.Records) > 0:
				c.Reply = "entries"
			case c.Reply == "ok":
				c.Reply, c.Response = "empty", fault.Passed
			default:
				c.Response = fault.Passed
			}
			if e.API == "ShareFetch" && accepts(e) {
				out = append(out, c)
				c = fault.Crossing{Link: fault.Broker, Op: kproxy.OpAck, Reply: reply(e), At: e.At}
				if strings.Contains(e.Fault, "(ack") { // the strike was the ack's, not the delivery's
					out[len(out)-1].Fault, c.Fault = "", e.Fault
				}
			}
		case "OffsetCommit", "TxnOffsetCommit", "ShareAcknowledge":
			c.Op = kproxy.OpAck
		case "EndTxn":
			c.Op = e.API
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// reply is the kind of a request's response: "none" when none reached the
// client, "error" when it or a partition's carries an error code.
func reply(e kproxy.Event) string {
	if !e.Answered || e.Dropped {
		return "none"
	}
	if e.ErrorCode != 0 {
		return "error"
	}
	for _, p := range e.Partitions {
		if p.ErrorCode != 0 {
			return "error"
		}
	}
	return "ok"
}

// accepts: a ShareFetch that acknowledges records as accepted (type 1),
// which a trigger on ack counts.
func accepts(e kproxy.Event) bool {
	for _, p := range e.Partitions {
		for _, b := range p.Acks {
			if slices.Contains(b.Types, 1) {
				return true
			}
		}
	}
	return false
}
