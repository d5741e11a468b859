package amqpproxy

import (
	"cmp"

	aproxy "github.com/outboxdrill/runner/proxy/amqp"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Crossings are the methods runner explore maps, counted as the proxy's
// triggers count them (proxy/amqp Trigger.matches): publish, every
// basic.publish (both boundaries count it; reply(publish) can strike only
// one on a channel in confirm mode: "ok" for the broker's basic.ack,
// "error" for its basic.nack, "none" when no confirm came; on another
// channel the broker answers nothing, ""); deliver, a basic.get
// (request(deliver) only: "entries" for its get-ok, "empty" for
// get-empty) or a basic.deliver or basic.get-ok (reply(deliver) only:
// "entries"); ack, the client's basic.ack (request only: AMQP answers
// none); basic.nack, basic.reject (request only) and tx.commit (both: its
// commit-ok) by their own names. The connection's and channels' setup
// (connection.*, channel.*, queue.declare, basic.qos, basic.consume,
// confirm.select, …) is left out.
func (x *proxy) Crossings() []fault.Crossing {
	type chanKey struct {
		conn int
		ch   uint16
	}
	var out []fault.Crossing
	var tags []uint64                  // each crossing's confirm number (publishes on a confirm channel)
	unconfirmed := map[chanKey][]int{} // publishes awaiting their confirm, by index in out
	answer := map[chanKey]int{}        // a basic.get or tx.commit awaiting its answer, by index in out
	for _, e := range x.p.Events() {
		k := chanKey{e.Conn, e.Channel}
		c := fault.Crossing{Link: fault.Broker, Fault: e.Fault, At: e.At}
		if e.FromServer {
			switch {
			case e.Kind == aproxy.KindConfirm:
				var rest []int
				for _, i := range unconfirmed[k] {
					if t := out[i]; tags[i] == e.DeliveryTag || e.Multiple && tags[i] < e.DeliveryTag {
						t.Reply = map[bool]string{true: "ok", false: "error"}[e.Method == "basic.ack"]
						t.Fault = cmp.Or(t.Fault, e.Fault) // a reply(publish) strikes at the confirm
						out[i] = t
						continue
					}
					rest = append(rest, i)
				}
				unconfirmed[k] = rest
			case e.Method == "basic.get-ok" || e.Method == "basic.get-empty" || e.Method == "tx.commit-ok":
				if i, ok := answer[k]; ok {
					out[i].Reply = map[string]string{"basic.get-ok": "entries", "basic.get-empty": "empty", "tx.commit-ok": "ok"}[e.Method]
					if e.Method == "tx.commit-ok" {
						out[i].Fault = cmp.Or(out[i].Fault, e.Fault) // a reply(tx.commit) strikes at its commit-ok
					}
					delete(answer, k)
				}
			case e.Kind == aproxy.KindChannel: // the broker closed the channel: nothing more answers on it
				delete(unconfirmed, k)
				delete(answer, k)
			}
			if e.Kind == aproxy.KindDelivery {
				c.Op, c.Reply, c.Request = aproxy.OpDeliver, "entries", fault.Passed
				out = append(out, c)
				tags = append(tags, 0)
			}
			continue
		}
		switch e.Method {
		case "basic.publish":
			c.Op = aproxy.OpPublish
			if e.Tag > 0 {
				c.Reply = "none"
				unconfirmed[k] = append(unconfirmed[k], len(out))
			} else {
				c.Response = fault.Counted // no confirm to hold (a transaction's is tx.commit's)
			}
		case "basic.get":
			c.Op, c.Reply, c.Response = aproxy.OpDeliver, "none", fault.Passed
			answer[k] = len(out)
		case "basic.ack":
			c.Op, c.Response = aproxy.OpAck, fault.Passed
		case "basic.nack", "basic.reject":
			c.Op, c.Response = e.Method, fault.Passed
		case "tx.commit":
			c.Op, c.Reply = e.Method, "none"
			answer[k] = len(out)
		case "channel.open", "channel.close", "channel.close-ok": // a channel anew: nothing before is answered on it
			delete(unconfirmed, k)
			delete(answer, k)
			continue
		default:
			continue
		}
		out = append(out, c)
		tags = append(tags, e.Tag)
	}
	return out
}
