package nats

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Publish is a JetStream publish the server stored: a PUB or HPUB answered
// with a PubAck that names its stream and sequence.
type Publish struct {
	At      time.Time // when the PubAck crossed
	Conn    int
	Subject string
	Header  Header
	Data    []byte
	// MsgID is the Nats-Msg-Id header, JetStream's own dedupe key ("" for
	// none): where a service usually puts its event id.
	MsgID     string
	Stream    string
	Seq       uint64
	Duplicate bool // JetStream dropped it as a duplicate of MsgID
	Fault     string
	Copy      bool // the proxy's second send of it (a duplicate fault), not the service's
}

// Delivery is a message JetStream handed the consumer: a MSG or HMSG whose
// reply subject is a $JS.ACK subject, which names where it came from.
type Delivery struct {
	At      time.Time
	Conn    int
	Subject string
	Header  Header
	Data    []byte
	MsgID   string
	Stream  string
	// Consumer is the durable (or ephemeral) consumer's name.
	Consumer string
	// Delivered is how many times JetStream has delivered this message,
	// this one included: 1 the first time.
	Delivered              uint64
	StreamSeq, ConsumerSeq uint64
	AckSubject             string
	Dropped                bool // an error fault kept it from the consumer
	Fault                  string
	Copy                   bool // the proxy's second hand-out of it (a duplicate fault)
}

// Ack is what a consumer published to a delivery's $JS.ACK subject and
// the proxy passed on to the server.
type Ack struct {
	At   time.Time
	Conn int
	// Kind is +ACK (also for an empty or +OK payload), +NXT, -NAK, +WPI or
	// +TERM; "" for a payload the server ignores.
	Kind                   string
	Data                   string
	Stream, Consumer       string
	Delivered              uint64
	StreamSeq, ConsumerSeq uint64
	AckSubject             string
}

// History sorts the relayed operations into publishes, deliveries and
// acks, in the order the proxy saw them. A publish counts once its PubAck
// came and named a stream (a refused one, or one whose PubAck never came,
// is left out); an ack counts once forwarded.
func (p *Proxy) History() (pubs []Publish, dels []Delivery, acks []Ack) {
	events := p.Events()
	sent := map[int64]*Event{}
	for i := range events {
		if events[i].Kind == KindPublish {
			sent[events[i].Seq] = &events[i]
		}
	}
	for _, e := range events {
		switch e.Kind {
		case KindReply:
			if pub, ok := sent[e.Answers]; ok {
				if pa, ok := parsePubAck(e.Data); ok && pa.Error == nil {
					pubs = append(pubs, Publish{At: e.At, Conn: pub.Conn, Subject: pub.Subject, Header: pub.Header, Data: pub.Data,
						MsgID: pub.Header.Get("Nats-Msg-Id"), Stream: pa.Stream, Seq: pa.Seq, Duplicate: pa.Duplicate, Fault: e.Fault, Copy: pub.Copy})
				}
			}
		case KindDelivery:
			d := Delivery{At: e.At, Conn: e.Conn, Subject: e.Subject, Header: e.Header, Data: e.Data, MsgID: e.Header.Get("Nats-Msg-Id"),
				AckSubject: e.Reply, Dropped: e.Dropped, Fault: e.Fault, Copy: e.Copy}
			m := parseAckSubject(e.Reply)
			d.Stream, d.Consumer, d.Delivered, d.StreamSeq, d.ConsumerSeq = m.stream, m.consumer, m.delivered, m.streamSeq, m.consumerSeq
			dels = append(dels, d)
		case KindAck:
			if !e.Dropped {
				m := parseAckSubject(e.Subject)
				acks = append(acks, Ack{At: e.At, Conn: e.Conn, Kind: ackKind(e.Data), Data: string(e.Data), Stream: m.stream, Consumer: m.consumer,
					Delivered: m.delivered, StreamSeq: m.streamSeq, ConsumerSeq: m.consumerSeq, AckSubject: e.Subject})
			}
		}
	}
	return pubs, dels, acks
}

// pubAck is JetStream's answer to a publish.
type pubAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Error     *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// parsePubAck reads a PubAck: one naming its stream, or an error.
func parsePubAck(data []byte) (pubAck, bool) {
	var a pubAck
	if json.Unmarshal(data, &a) != nil {
		return a, false
	}
	return a, a.Stream != "" || a.Error != nil
}

func isPubAck(data []byte) bool { _, ok := parsePubAck(data); return ok }

// ackMeta is what a $JS.ACK subject says of a delivery.
type ackMeta struct {
	stream, consumer                  string
	delivered, streamSeq, consumerSeq uint64
}

// parseAckSubject reads $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.
// <cseq>.<time>.<pending> (9 tokens), or the form with a domain and an
// account hash after ACK and a token at the end (11 or more), as nats.go
// reads them. Anything else gives nothing.
func parseAckSubject(s string) ackMeta {
	t := strings.Split(s, ".")
	if len(t) < 9 || t[0] != "$JS" || t[1] != "ACK" {
		return ackMeta{}
	}
	switch {
	case len(t) == 9:
		t = t[2:]
	case len(t) >= 11:
		t = t[4:]
	default:
		return ackMeta{}
	}
	num := func(s string) uint64 { n, _ := strconv.ParseUint(s, 10, 64); return n }
	return ackMeta{stream: t[0], consumer: t[1], delivered: num(t[2]), streamSeq: num(t[3]), consumerSeq: num(t[4])}
}
