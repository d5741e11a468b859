package broker

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/outboxdrill/runner/proxy/fault"
)

// ProxyKind is a broker's protocol proxy as the runner uses it: one per
// service start, so that a fault and a history entry belong to exactly
// one service's connection. It is the broker's fault.Vocabulary: the
// operations a broker.* fault may name on it, and the compiler of a
// trigger into what its proxies arm (fault.Compile).
type ProxyKind interface {
	// Listen starts a proxy in front of the server at url (the run's
	// broker URL, with its credentials).
	Listen(url string) (Proxy, error)
	fault.Vocabulary
}

// Dialects are the fault dialects of the kinds that have a proxy, in
// their order: what a fault's broker operation is judged against.
func Dialects(kinds []*Kind) []fault.Dialect {
	var out []fault.Dialect
	for _, k := range kinds {
		if k.Proxy != nil {
			out = append(out, fault.Dialect{Broker: k.Name, Vocabulary: k.Proxy})
		}
	}
	return out
}

// Proxy is one started protocol proxy.
type Proxy interface {
	// URL is the run's broker URL pointed at the proxy (${broker.url});
	// Address its host:port (${broker.address}).
	URL() string
	Address() string
	// Arm arms c, compiled by this broker's ProxyKind (fault.Compile), as
	// it is; c.Action.Kill is the function a kill calls.
	Arm(c fault.Compiled) (Strike, error)
	// Wire is what crossed the proxy, in the checker's terms, with the
	// system file's stream: mapping saying where the event id is.
	Wire(m WireMap) Wire
	Close()
}

// Strike is a trigger armed on a proxy (fault.Armed is one).
type Strike interface {
	Done() <-chan struct{}
	Fired() bool
	Holding() bool
	Err() error
	StruckAt() time.Time
	// Counted is closed at the first crossing the trigger counted;
	// Retire gives up one that has not struck (fault.Armed's).
	Counted() <-chan struct{}
	Retire()
}

// WireMap is the system file's stream: mapping: the field (Redis), header
// (Kafka, NATS, AMQP) or property that carries the event id and the
// payload. Each proxy says in its Kind's doc where it looks when the field
// is absent or "" (Kafka: the record key and value).
type WireMap struct{ EventID, Payload string }

// Wire is a proxy's history: what the services published, were handed and
// acknowledged, in the order the proxy saw it.
type Wire struct {
	Publishes  []WireMsg
	Deliveries []WireMsg
	// NotJudged are the invariants (history's names) this broker's wire
	// cannot support, each with why.
	NotJudged map[string]string
	// Copies: the broker gives an entry no id the wire shows (AMQP), so
	// EntryID is "" and a publish is told from its retry only by count:
	// each publish puts one copy in every bound queue, and each delivery
	// Acked settled one copy for good. The checker counts copies instead
	// of following entry ids (history.Team.Copies).
	Copies bool
	// EventIDFrom says where this wire looks for a message's event id
	// (the mapping's header, else the broker's own place), for the error
	// about a message that carried none; "" where the mapping names a
	// field every message must carry (Redis: WireMsg.Fields).
	EventIDFrom string
	// Dropped counts the events the proxy's record left out, full
	// (fault.MaxRecordBytes): the history is then incomplete.
	Dropped int64
}

// WireMsg is one publish or delivery.
type WireMsg struct {
	At time.Time
	// Op is the broker's own operation (XADD, Produce, basic.deliver), for
	// step traces.
	Op                        string
	EntryID, EventID, Payload string
	// Dest is where it was published (a stream key, a topic, a subject,
	// an exchange), of a delivery too; Fields the
	// names of the fields it carried where the WireMap names one of them
	// (Redis), sorted; nil where the mapping falls back (Kafka's key).
	Dest   string
	Fields []string
	// Group is a delivery's consumer group as the broker names it; "" when
	// the wire does not say.
	Group string
	// Acked: the group acknowledged this delivery (the latest of its
	// entry before the ack), as the broker confirmed.
	Acked bool
	// Pass is how many broker faults struck before it, in the proxy's
	// record order (0 where the proxy does not count them): a strike's
	// time is taken as its request goes out, but what the client
	// pipelined before it is answered, and recorded, after that and
	// belongs to the pass before, as does the struck request itself. The
	// history splits a service process's publishes into passes by it.
	Pass int
}

// Passes maps the time of each of a proxy's n records, in its record
// order, to how many broker faults struck before it (WireMsg.Pass): at is
// record i's time, struck whether a fault struck at it.
func Passes(n int, at func(int) time.Time, struck func(int) bool) map[time.Time]int {
	out := make(map[time.Time]int, n)
	k := 0
	for i := range n {
		out[at(i)] = k
		if struck(i) {
			k++
		}
	}
	return out
}

// PassesWithCopies is Passes where a record copied(i) is a duplicate
// fault's copy: the proxy's publish, not the service's, so a pass of its
// own (the service's one publish and the copy are no double publish of
// the service's; what it publishes after is the next pass's).
func PassesWithCopies(n int, at func(int) time.Time, struck, copied func(int) bool) map[time.Time]int {
	out := make(map[time.Time]int, n)
	k := 0
	for i := range n {
		if copied(i) {
			k++
		}
		out[at(i)] = k
		if struck(i) {
			k++
		}
	}
	return out
}

// ViaURL is url pointed at the proxy listening on addr: its first host
// replaced, further seeds (kafka://a:1,b:2) dropped since the proxy learns
// the others from the cluster. The credentials, path and query stay.
func ViaURL(raw, addr string) (string, error) {
	first, _, _ := strings.Cut(raw, ",")
	u, err := url.Parse(strings.TrimSpace(first))
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("broker: not a URL with a host")
	}
	u.Host = addr
	return u.String(), nil
}

// FirstHost is the HOST:PORT of url's first server, def the port when it
// names none: the upstream a proxy dials.
func FirstHost(raw, def string) (string, error) {
	first, _, _ := strings.Cut(raw, ",")
	u, err := url.Parse(strings.TrimSpace(first))
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("broker: not a URL with a host")
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), def), nil
	}
	return u.Host, nil
}

// CrossingLog is a Proxy that keeps what crossed it as Crossings, in the
// order its triggers counted them (every broker proxy the runner has).
type CrossingLog interface {
	Crossings() []fault.Crossing
}

// Idler is a Proxy that tells when its client last asked the broker for
// new work and got none (an idle poll; Redis: an XREADGROUP of ">" that
// handed out nothing, by when the request was sent; NATS: now, while a
// pull sent with every delivery settled on the wire has had no delivery
// since, proxy/nats idle.go). A consumer that sent one after the state
// last changed had finished with what it held before and found nothing
// new: settling need not wait out its whole quiet window for it
// (judge/settle.go). A proxy that cannot tell is not one.
type Idler interface {
	IdlePoll() time.Time
}

// Patient is a Proxy that read on the wire how long the services told the
// broker they may take before the broker acts for them: a Kafka consumer's
// session and rebalance timeouts (JoinGroup), a JetStream consumer's
// AckWait (its consumer create request). Settling waits that long, at
// least, before it calls a consumer that went quiet stuck: the broker
// itself has not acted yet.
type Patient interface {
	// Waits are the timers the services announced so far, each once.
	Waits() []Wait
}

// Wait is one timer a service announced on the wire.
type Wait struct {
	What string        // "consumer group g's session timeout (JoinGroup)"
	For  time.Duration // how long
}
