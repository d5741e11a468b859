package amqp

import (
	"slices"
	"time"
)

// Publish is a basic.publish the proxy forwarded, with what the broker
// said of it.
type Publish struct {
	At                   time.Time
	Conn                 int
	Channel              uint16
	Exchange, RoutingKey string
	Properties           Properties // MessageID and Headers are where services put an event id
	Body                 []byte
	Tag                  uint64 // its publisher-confirm number (0: the channel had no confirms)
	Tx                   bool   // sent on a transactional channel
	// Outcome is the broker's word on it: "ack" (confirmed), "nack"
	// (refused), "committed" or "rolled-back" (a transaction's), or ""
	// (nothing: a channel without confirms or transactions, or the
	// connection ended first).
	Outcome string
	Fault   string // a trigger that struck at it, or at its confirm
	Copy    bool   // the proxy's second send of it (a duplicate fault), not the service's
}

// Delivery is a message the broker handed the client: basic.deliver or
// basic.get-ok.
type Delivery struct {
	At          time.Time
	Conn        int
	Channel     uint16
	Method      string
	Queue       string // "" when the proxy did not see the consumer's basic.consume
	ConsumerTag string
	DeliveryTag uint64
	Redelivered bool
	// NoAck: the consumer or basic.get asked for no acks, so the broker
	// took the message as acknowledged when it sent it: it is settled
	// whatever the client does with it.
	NoAck                bool
	Exchange, RoutingKey string
	Properties           Properties // a quorum queue counts redeliveries in Headers["x-delivery-count"]
	Body                 []byte
	Dropped              bool // an error or drop fault kept it from the client
	Fault                string
	Copy                 bool // the proxy's second hand-out of it (a duplicate fault), not the broker's
}

// Ack is a client's basic.ack, basic.nack or basic.reject the proxy
// forwarded.
type Ack struct {
	At                time.Time
	Conn              int
	Channel           uint16
	Method            string
	DeliveryTag       uint64
	Multiple, Requeue bool
	// Deliveries are the indexes, in the deliveries History returns, of
	// those it settles.
	Deliveries []int
	// Outcome is "committed" or "rolled-back" on a transactional channel
	// once the broker said so, else "".
	Outcome string
	Tx      bool // sent on a transactional channel
}

// chanHistory is what History keeps per channel while it reads.
type chanHistory struct {
	unconfirmed    []int // publishes awaiting their confirm
	txPubs, txAcks []int // awaiting their transaction's end
	delivered      map[uint64]int
	deliveredOrder []uint64
}

type chanKey struct {
	conn int
	ch   uint16
}

// History sorts the relayed methods into publishes, deliveries and acks,
// in the order the proxy saw them. A publish or an ack a fault stopped is
// left out; a delivery a fault dropped is kept, Dropped.
func (p *Proxy) History() (pubs []Publish, dels []Delivery, acks []Ack) {
	state := map[chanKey]*chanHistory{}
	at := func(e *Event) *chanHistory {
		k := chanKey{e.Conn, e.Channel}
		if state[k] == nil || e.Kind == KindChannel && e.Method == "channel.open" {
			state[k] = &chanHistory{delivered: map[uint64]int{}}
		}
		return state[k]
	}
	for _, e := range p.Events() {
		h := at(&e)
		switch {
		case e.Kind == KindPublish && !e.Dropped:
			pubs = append(pubs, publishOf(e))
			if e.Tag > 0 {
				h.unconfirmed = append(h.unconfirmed, len(pubs)-1)
			}
			if e.Tx {
				h.txPubs = append(h.txPubs, len(pubs)-1)
			}
		case e.Kind == KindConfirm:
			h.confirm(pubs, e)
		case e.Kind == KindDelivery:
			dels = append(dels, deliveryOf(e))
			if !e.Dropped {
				h.delivered[e.DeliveryTag] = len(dels) - 1
				h.deliveredOrder = append(h.deliveredOrder, e.DeliveryTag)
			}
		case e.Kind == KindAck && !e.Dropped:
			acks = append(acks, Ack{At: e.At, Conn: e.Conn, Channel: e.Channel, Method: e.Method, DeliveryTag: e.DeliveryTag,
				Multiple: e.Multiple, Requeue: e.Requeue, Tx: e.Tx, Deliveries: h.settle(e.DeliveryTag, e.Multiple)})
			if e.Tx {
				h.txAcks = append(h.txAcks, len(acks)-1)
			}
		case e.Kind == KindTx && e.FromServer && (e.Method == "tx.commit-ok" || e.Method == "tx.rollback-ok"):
			h.endTx(pubs, acks, e.Method == "tx.commit-ok")
		}
	}
	return pubs, dels, acks
}

func publishOf(e Event) Publish {
	p := Publish{At: e.At, Conn: e.Conn, Channel: e.Channel, Exchange: e.Exchange, RoutingKey: e.RoutingKey, Body: e.Body, Tag: e.Tag, Tx: e.Tx, Fault: e.Fault, Copy: e.Copy}
	if e.Properties != nil {
		p.Properties = *e.Properties
	}
	return p
}

func deliveryOf(e Event) Delivery {
	d := Delivery{At: e.At, Conn: e.Conn, Channel: e.Channel, Method: e.Method, Queue: e.Queue, ConsumerTag: e.ConsumerTag,
		DeliveryTag: e.DeliveryTag, Redelivered: e.Redelivered, NoAck: e.NoAck, Exchange: e.Exchange, RoutingKey: e.RoutingKey, Body: e.Body,
		Dropped: e.Dropped, Fault: e.Fault, Copy: e.Copy}
	if e.Properties != nil {
		d.Properties = *e.Properties
	}
	return d
}

// confirm applies a broker's basic.ack or basic.nack to the publishes it
// covers.
func (h *chanHistory) confirm(pubs []Publish, e Event) {
	outcome := "ack"
	if e.Method == "basic.nack" {
		outcome = "nack"
	}
	h.unconfirmed = slices.DeleteFunc(h.unconfirmed, func(i int) bool {
		if t := pubs[i].Tag; t == e.DeliveryTag || e.Multiple && t <= e.DeliveryTag {
			pubs[i].Outcome = outcome
			if e.Fault != "" {
				pubs[i].Fault = e.Fault
			}
			return true
		}
		return false
	})
}

// settle is the deliveries an ack covers: its tag, or every one up to it
// (all, for tag 0) when multiple.
func (h *chanHistory) settle(tag uint64, multiple bool) []int {
	var out []int
	h.deliveredOrder = slices.DeleteFunc(h.deliveredOrder, func(t uint64) bool {
		if t == tag || multiple && (tag == 0 || t < tag) {
			out = append(out, h.delivered[t])
			delete(h.delivered, t)
			return true
		}
		return false
	})
	return out
}

// endTx applies a transaction's end to the publishes and acks it held.
func (h *chanHistory) endTx(pubs []Publish, acks []Ack, committed bool) {
	outcome := "rolled-back"
	if committed {
		outcome = "committed"
	}
	for _, i := range h.txPubs {
		pubs[i].Outcome = outcome
	}
	for _, i := range h.txAcks {
		acks[i].Outcome = outcome
	}
	h.txPubs, h.txAcks = nil, nil
}
