// Package kafkaproxy is Kafka's protocol proxy as the runner uses it
// (broker.ProxyKind): a proxy/kafka proxy in front of each service's
// connections to the cluster, its faults named by the neutral operations
// or Kafka's own requests, and what crossed it read as the history's wire,
// the groups' timeouts and explore's crossings.
package kafkaproxy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/proxy/fault"
	kproxy "github.com/outboxdrill/runner/proxy/kafka"
)

// Kind is Kafka's protocol proxy (proxy/kafka): it bootstraps from
// the first seed and learns the other brokers from the cluster.
//
// The event id of a record is its header named by the stream: mapping's
// event_id, else its key; the payload its header named by payload, else
// its value. Acks are offset commits: a commit of offset N acknowledges,
// for the group, the latest delivery of every record of that partition
// below N.
type Kind struct{}

// native is t as proxy/kafka arms it: its filters other than topic and
// group are refused there.
// Operations are the neutral ones, then the proxy's own.
func (Kind) Operations() []string { return kproxy.Operations() }

// Operation is op when the proxy names it so, else why not, with the
// closest of its operations.
func (Kind) Operation(op string) (string, error) {
	return fault.ListedOperation(op, kproxy.Operations(), kproxy.UnknownOperation)
}

// Compile is t as the proxy arms it, checked.
func (Kind) Compile(t fault.Trigger) (any, error) { return fault.Native(native(t).Compile()) }

func native(t fault.Trigger) kproxy.Trigger {
	k := kproxy.Trigger{Boundary: t.Boundary, Op: t.Filter.Command, Topic: t.Filter.Topic, Group: t.Filter.Group, Nth: t.Nth, Action: t.Action}
	if f := t.Filter; f.Subject != "" || f.Exchange != "" || f.RoutingKey != "" || f.Queue != "" {
		k.Op = "" // Check: no such filter on Kafka
	}
	return k
}

func (Kind) Listen(url string) (broker.Proxy, error) {
	seeds, err := kafka.Seeds(url)
	if err != nil {
		return nil, err
	}
	p, err := kproxy.ListenWith(seeds[0], kproxy.DefaultLimits())
	if err != nil {
		return nil, err
	}
	via := p.Addr()
	if strings.HasPrefix(url, "kafka://") {
		via = "kafka://" + via
	}
	return &proxy{p: p, url: via}, nil
}

type proxy struct {
	p   *kproxy.Proxy
	url string
}

var _ broker.Patient = (*proxy)(nil)

// Waits are, per consumer group its services joined through the proxy,
// the longest session and rebalance timeouts their JoinGroups announced:
// the coordinator hands a silent member's partitions to another only once
// its session timeout ran out, and waits up to the rebalance timeout for
// the members to rejoin
// (https://kafka.apache.org/documentation/#consumerconfigs_session.timeout.ms).
func (x *proxy) Waits() []broker.Wait { return waitsOf(x.p.Groups()) }

func waitsOf(groups []kproxy.Group) []broker.Wait {
	var out []broker.Wait
	for _, g := range groups {
		if g.Session > 0 {
			out = append(out, broker.Wait{What: fmt.Sprintf("consumer group %s's session timeout (JoinGroup)", g.Name), For: g.Session})
		}
		if g.Rebalance > 0 {
			out = append(out, broker.Wait{What: fmt.Sprintf("consumer group %s's rebalance timeout (JoinGroup)", g.Name), For: g.Rebalance})
		}
	}
	return out
}

func (x *proxy) URL() string     { return x.url }
func (x *proxy) Address() string { return x.p.Addr() }
func (x *proxy) Close()          { x.p.Close() }

func (x *proxy) Arm(c fault.Compiled) (broker.Strike, error) {
	n, ok := c.Native.(kproxy.Checked)
	if !ok {
		return nil, fmt.Errorf("%s: not compiled for the Kafka proxy", c.On())
	}
	return x.p.ArmChecked(n, c.Action.Kill)
}

// notJudged is what a Kafka wire cannot support.
var notJudged = map[string]string{
	"stranded": "a Kafka consumer group holds no record for a worker: one it was handed and did not commit is fetched again from the committed offset by whoever owns the partition, so no entry is stranded with a dead worker",
}

// Wire maps the produced, fetched and committed records: a transaction's
// records count once committed (an aborted one never happened).
func (x *proxy) Wire(m broker.WireMap) broker.Wire {
	pubs, dels, acks := x.p.History()
	pass := x.passes() // after History: every request it read is there
	w := broker.Wire{NotJudged: notJudged, EventIDFrom: "the record key"}
	if m.EventID != "" {
		w.EventIDFrom = fmt.Sprintf("the header %q (the system file's stream.event_id), else the record key", m.EventID)
	}
	if u := unread(x.p.Events()); u != "" {
		// A request or response the proxy could not read is missing from
		// the history: what rests on all of it is not judged.
		w.NotJudged = maps.Clone(notJudged)
		for _, inv := range []string{"acked_without_effect", "double_published", "lost"} {
			w.NotJudged[inv] = "the Kafka proxy could not read all it relayed (" + u + "), so the history from the wire lacks it"
		}
	}
	stored := map[string]bool{}
	for _, p := range pubs {
		if p.TransactionalID != "" && p.Outcome != "committed" {
			continue
		}
		id := kafka.EntryID(p.Partition, p.Offset)
		op := "Produce"
		if p.Copy {
			if stored[p.Topic+" "+id] {
				continue // the broker deduped the copy (an idempotent producer's sequence): no second record
			}
			op = "Produce (the drill's duplicate of the one before)"
		}
		stored[p.Topic+" "+id] = true
		w.Publishes = append(w.Publishes, broker.WireMsg{At: p.At, Op: op, EntryID: id, Dest: p.Topic,
			EventID: field(p.Record, m.EventID, p.Key), Payload: field(p.Record, m.Payload, p.Value), Pass: pass[p.At]})
	}
	group := onlyGroup(acks)
	// A response an error fault replaced never reached the client.
	dels = slices.DeleteFunc(dels, func(d kproxy.Delivery) bool { return d.Dropped })
	for _, d := range dels {
		g := d.Group
		if g == "" {
			g = group
		}
		w.Deliveries = append(w.Deliveries, broker.WireMsg{At: d.At, Op: d.API, EntryID: kafka.EntryID(d.Partition, d.Offset), Dest: d.Topic, Group: g,
			EventID: field(d.Record, m.EventID, d.Key), Payload: field(d.Record, m.Payload, d.Value), Pass: pass[d.At]})
	}
	markCommitted(w.Deliveries, dels, acks)
	w.Dropped = x.p.Dropped()
	return w
}

// unread is the first thing the proxy could not read, "" for none.
func unread(es []kproxy.Event) string {
	for _, e := range es {
		if e.Unread != "" {
			return e.API + ": " + e.Unread
		}
	}
	return ""
}

// passes are broker.PassesWithCopies of the requests the proxy recorded.
func (x *proxy) passes() map[time.Time]int {
	es := x.p.Events()
	return broker.PassesWithCopies(len(es), func(i int) time.Time { return es[i].At }, func(i int) bool { return es[i].Fault != "" }, func(i int) bool { return es[i].Copy })
}

// field is the record's header named name, else def.
func field(r kproxy.Record, name string, def []byte) string {
	if name != "" {
		for _, h := range r.Headers {
			if h.Key == name {
				return string(h.Value)
			}
		}
	}
	return string(def)
}

// onlyGroup is the one group the service committed as: a Fetch names no
// group, so its records are the group's only when the service committed
// for no other ("" then: the deliveries are nobody's, never guessed).
func onlyGroup(acks []kproxy.Ack) string {
	g := ""
	for _, a := range acks {
		if a.Group == "" || a.Share != nil || g != "" && a.Group != g {
			return ""
		}
		g = a.Group
	}
	return g
}

// markCommitted sets Acked on the latest delivery, before each commit, of
// each record below the committed offset of its group's partition (an
// aborted transactional commit never happened).
func markCommitted(out []broker.WireMsg, dels []kproxy.Delivery, acks []kproxy.Ack) {
	for _, a := range acks {
		if a.Share != nil {
			markShareAcked(out, dels, a)
			continue
		}
		if a.TransactionalID != "" && a.Outcome != "committed" {
			continue
		}
		latest := map[int64]int{}
		for i, d := range dels {
			if !d.At.After(a.At) && out[i].Group == a.Group && d.Topic == a.Topic && d.Partition == a.Partition && d.Offset < a.Offset {
				latest[d.Offset] = i
			}
		}
		for _, i := range latest {
			out[i].Acked = true
		}
	}
}

// markShareAcked sets Acked on the group's latest delivery, before the
// acknowledgement, of each record a share group's consumer accepted or
// rejected (KIP-932: 1 accept, 2 release, 3 reject; one type for the
// whole batch, or one per offset): both finish the record for the group,
// a release hands it out again.
func markShareAcked(out []broker.WireMsg, dels []kproxy.Delivery, a kproxy.Ack) {
	for _, b := range a.Share {
		for off := b.First; off <= b.Last && off-b.First < 1<<20; off++ {
			t := int8(0)
			switch {
			case len(b.Types) == 1:
				t = b.Types[0]
			case off-b.First < int64(len(b.Types)):
				t = b.Types[off-b.First]
			}
			if t != 1 && t != 3 {
				continue
			}
			latest := -1
			for i, d := range dels {
				if !d.At.After(a.At) && out[i].Group == a.Group && d.Topic == a.Topic && d.Partition == a.Partition && d.Offset == off {
					latest = i
				}
			}
			if latest >= 0 {
				out[latest].Acked = true
			}
		}
	}
}

// Dropped is how many events the proxy's record left out, full.
func (x *proxy) Dropped() int64 { return x.p.Dropped() }
