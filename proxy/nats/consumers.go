package nats

import (
	"encoding/json"
	"strings"
	"sync"
	"time"
)

// MaxConsumers bounds the JetStream consumers whose configuration the
// proxy keeps; MaxConsumerAPIReplies the consumer API replies it awaits
// on one connection. A drill's services create a handful; past the caps
// a consumer's configuration is not kept, and nothing is guessed for it.
const (
	MaxConsumers          = 64
	MaxConsumerAPIReplies = 64
)

// Consumer is a JetStream consumer's configuration as the server stated it
// in a reply that crossed the proxy: a consumer create (or durable create)
// response, or a consumer info response. The reply, not the request, is
// read: the server may refuse a create, and what it answers is what holds.
type Consumer struct {
	Stream, Name string
	// AckPolicy is "explicit", "all" or "none": with "none" the server
	// takes every message as acknowledged as it delivers it
	// (https://docs.nats.io/nats-concepts/jetstream/consumers#ackpolicy).
	AckPolicy string
	// AckWait is how long the server waits for an ack before it delivers
	// a message again (0 where the reply gave none: an AckNone push
	// consumer's).
	AckWait time.Duration
	// From is the reply it was read from: "create" or "info".
	From string
	At   time.Time
}

// consumers is what the proxy read of JetStream consumers, by stream and
// name, in the order first seen.
type consumers struct {
	mu    sync.Mutex
	by    map[[2]string]int
	order []Consumer
}

// note keeps c, replacing what an earlier reply said of the same consumer.
func (cs *consumers) note(c Consumer) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := [2]string{c.Stream, c.Name}
	if i, ok := cs.by[k]; ok {
		cs.order[i] = c
		return
	}
	if len(cs.order) >= MaxConsumers {
		return
	}
	if cs.by == nil {
		cs.by = map[[2]string]int{}
	}
	cs.by[k] = len(cs.order)
	cs.order = append(cs.order, c)
}

// Consumers are the JetStream consumers whose configuration a reply that
// crossed the proxy stated (at most MaxConsumers), in the order first
// seen, each with the latest reply's.
func (p *Proxy) Consumers() []Consumer {
	p.consumers.mu.Lock()
	defer p.consumers.mu.Unlock()
	return append([]Consumer(nil), p.consumers.order...)
}

// consumerAPI reports whether a client's PUB asks the server for a
// consumer's configuration in its reply: a create, durable create or info.
func consumerAPI(subject string) bool {
	for _, p := range []string{"$JS.API.CONSUMER.CREATE.", "$JS.API.CONSUMER.DURABLE.CREATE.", "$JS.API.CONSUMER.INFO."} {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

// consumerReply is the part of a consumer create or info response the
// proxy reads.
type consumerReply struct {
	Type   string `json:"type"`
	Stream string `json:"stream_name"`
	Name   string `json:"name"`
	Config *struct {
		AckPolicy string `json:"ack_policy"`
		AckWait   int64  `json:"ack_wait"` // nanoseconds
	} `json:"config"`
	Error *json.RawMessage `json:"error"`
}

// parseConsumerReply reads a consumer create or info response; false for
// anything else, an error among them.
func parseConsumerReply(data []byte) (Consumer, bool) {
	var r consumerReply
	if json.Unmarshal(data, &r) != nil || r.Error != nil || r.Config == nil || r.Stream == "" || r.Name == "" {
		return Consumer{}, false
	}
	var from string
	switch r.Type {
	case "io.nats.jetstream.api.v1.consumer_create_response":
		from = "create"
	case "io.nats.jetstream.api.v1.consumer_info_response":
		from = "info"
	default:
		return Consumer{}, false
	}
	return Consumer{Stream: r.Stream, Name: r.Name, AckPolicy: r.Config.AckPolicy, AckWait: time.Duration(max(r.Config.AckWait, 0)), From: from}, true
}

// awaitConsumerReply remembers the reply subject of a client's consumer
// API request, within MaxConsumerAPIReplies.
func (c *conn) awaitConsumerReply(m *msg) {
	if m.reply == "" || !consumerAPI(m.subject) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.apiReplies[m.reply] && len(c.apiReplies) < MaxConsumerAPIReplies && c.acct.Take(entryCost+int64(len(m.reply))) == nil {
		c.apiReplies[strings.Clone(m.reply)] = true
	}
}

// consumerReply keeps the configuration a server's MSG states when it
// answers a consumer API request the client made.
func (c *conn) consumerReply(m *msg) {
	c.mu.Lock()
	awaited := c.apiReplies[m.subject]
	if awaited {
		delete(c.apiReplies, m.subject)
		c.acct.Release(entryCost + int64(len(m.subject)))
	}
	c.mu.Unlock()
	if !awaited {
		return
	}
	if cs, ok := parseConsumerReply(m.data()); ok {
		cs.At = time.Now()
		c.p.consumers.note(cs)
	}
}
