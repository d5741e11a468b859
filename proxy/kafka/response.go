package kafka

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kind is what the proxy takes a request for.
type Kind int

const (
	KindOther    Kind = iota
	KindProduce       // Produce
	KindFetch         // Fetch or ShareFetch (a ShareFetch may carry acknowledgements too)
	KindCommit        // OffsetCommit or TxnOffsetCommit
	KindShareAck      // ShareAcknowledge
	KindEndTxn        // EndTxn
)

func kindOf(key int16) Kind {
	switch key {
	case keyProduce:
		return KindProduce
	case keyFetch, keyShareFetch:
		return KindFetch
	case keyOffsetCommit, keyTxnOffsetCommit:
		return KindCommit
	case keyShareAcknowledge:
		return KindShareAck
	case keyEndTxn:
		return KindEndTxn
	}
	return KindOther
}

// Event is one request the proxy relayed, with what its response said, or
// a request it stopped for a fault.
type Event struct {
	Seq     int64 // the proxy's number for the event, from 1
	Conn    int
	Broker  string // the upstream broker the connection reaches
	API     string // Produce, Fetch, …
	Version int16
	Kind    Kind

	TransactionalID, Group string
	// Records are a Produce's records (with the offsets the broker gave
	// them), or those a Fetch or ShareFetch delivered.
	Records []Record
	// DeliveryCounts are, of a ShareFetch, each record's delivery count.
	DeliveryCounts []int16
	// Partitions are the commits' offsets, the share acknowledgements, and
	// every partition's error code.
	Partitions []PartitionResult
	Commit     bool  // EndTxn: commit (else abort)
	ErrorCode  int16 // the response's own (EndTxn, Fetch, the group APIs)
	Answered   bool  // a response came and was read
	// Unread says what the proxy could not read (a request over its caps,
	// a batch it cannot decompress): the history lacks it.
	Unread  string
	Dropped bool   // a fault kept the request from the broker, or the response from the client
	Fault   string // the trigger that struck here, "" for none
	// Copy: the proxy's own second send of a Produce a duplicate struck
	// (its response reached no client): the service sent it once.
	Copy bool
	At   time.Time
}

// PartitionResult is what a request said of a partition, and its
// response's error code.
type PartitionResult struct {
	Topic     string
	Partition int32
	Offset    int64           // a commit's offset: the next the group reads
	Acks      []ShareAckBatch // a share acknowledgement's
	ErrorCode int16
}

// ShareAckBatch acknowledges offsets First to Last: Types holds one type
// for all, or one per offset (0 gap, 1 accept, 2 release, 3 reject).
type ShareAckBatch struct {
	First, Last int64
	Types       []int8
}

// requestEvent is the event of a request, as the proxy read it; records
// says to read a Produce's records (numbered as their batches number
// them: no response gives them offsets).
func (c *conn) requestEvent(q *request, fault string, records bool) Event {
	ev := Event{Conn: c.id, Broker: c.upstream, API: name(q.key), Version: q.version, Kind: kindOf(q.key), TransactionalID: q.txnID,
		Group: q.group, Commit: q.commit, Unread: q.unread, Fault: fault}
	if ev.Kind == KindOther {
		return ev
	}
	for _, t := range q.topics {
		for _, p := range t.parts {
			pr := PartitionResult{Topic: t.name, Partition: p.partition, Offset: p.offset}
			for _, b := range p.acks {
				pr.Acks = append(pr.Acks, ShareAckBatch{First: b.first, Last: b.last, Types: b.types})
			}
			ev.Partitions = append(ev.Partitions, pr)
			if q.key == keyProduce && records {
				ev.Records = append(ev.Records, c.produced(&ev, t.name, p, -1)...)
			}
		}
	}
	return ev
}

// produced is a Produce partition's records, numbered from base (-1: as
// the batch numbers them). The request's reading parsed them (refusal);
// a request read otherwise (a test) parses them here, within a message's
// cap.
func (c *conn) produced(ev *Event, topic string, p part, base int64) []Record {
	if !p.parsed {
		_ = p.parse(topic, newSpend(nil))
	}
	if p.bad != "" && ev.Unread == "" {
		ev.Unread = fmt.Sprintf("%s[%d]: %s", topic, p.partition, p.bad)
	}
	out := make([]Record, 0, len(p.recs))
	for n, r := range p.recs {
		if base >= 0 {
			r.Offset = base + int64(n)
		}
		out = append(out, r)
	}
	return out
}

// parse reads a Produce partition's records, taking what they build from
// s: an error when a cap is reached (the request is refused), else what
// could not be read is left in bad (the broker judges the batch).
func (p *part) parse(topic string, s *spend) error {
	batches, err := parseBatchesSpending(p.records, topic, p.partition, s)
	p.parsed = true
	if err != nil {
		if overCap(err) {
			return err
		}
		p.bad = err.Error()
	}
	for _, b := range batches {
		p.recs = append(p.recs, b.records...)
	}
	return nil
}

// spent is what the response being read may build.
func (c *conn) spent() *spend {
	if c.rspend != nil {
		return c.rspend
	}
	return newSpend(nil)
}

// responseHeader is the length of a response's header: the correlation
// id, and in flexible versions (but ApiVersions's) tagged fields.
func responseHeader(q *request, msg []byte) (int, error) {
	if !q.flexible || q.key == keyApiVersions {
		return 8, nil
	}
	r := reader{b: msg[8:]}
	r.tags(true)
	if r.bad {
		return 0, fmt.Errorf("a malformed %s response header", name(q.key))
	}
	return len(msg) - len(r.b), nil
}

// decoded are the responses the proxy decodes: those that name brokers,
// and those the history and the triggers read.
var decoded = map[int16]bool{keyApiVersions: true, keyMetadata: true, keyFindCoordinator: true, keyDescribeCluster: true, keyDescribeQuorum: true,
	keyProduce: true, keyFetch: true, keyOffsetCommit: true, keyTxnOffsetCommit: true, keyEndTxn: true, keyShareFetch: true,
	keyShareAcknowledge: true, keyJoinGroup: true, keySyncGroup: true, keyHeartbeat: true, keyLeaveGroup: true}

// readResponse decodes a response (by its request's key and version),
// rewrites the broker addresses it names, and reads what the history
// keeps. It returns the message to pass on, the event, and, for a
// delivery, the crossing the triggers count.
func (c *conn) readResponse(k *call, msg []byte) ([]byte, Event, crossing, error) {
	q := k.q
	ev := c.requestEvent(q, k.delayed, false)
	if !decoded[q.key] {
		return msg, ev, crossing{}, nil
	}
	hdr, err := responseHeader(q, msg)
	if err != nil {
		return nil, ev, crossing{}, err
	}
	resp := kmsg.ResponseForKey(q.key)
	resp.SetVersion(q.version)
	if err := resp.ReadFrom(msg[hdr:]); err != nil {
		return nil, ev, crossing{}, fmt.Errorf("the proxy could not read this %s v%d response: %w", name(q.key), q.version, err)
	}
	changed, err := c.p.rewrite(resp)
	if err != nil {
		return nil, ev, crossing{}, err
	}
	if changed {
		msg = encode(msg[4:hdr], resp)
	}
	ev.Answered = true
	x := c.readBody(q, resp, &ev)
	x.fromServer = x.fromServer && len(ev.Records) > 0
	return msg, ev, x, nil
}

// encode builds a message from a response header and a body.
func encode(header []byte, resp kmsg.Response) []byte {
	body := resp.AppendTo(nil)
	out := binary.BigEndian.AppendUint32(nil, uint32(len(header)+len(body)))
	return append(append(out, header...), body...)
}

// encodeResponse builds a response to a request, with a header of the
// version it takes.
func encodeResponse(q *request, resp kmsg.Response) []byte {
	header := binary.BigEndian.AppendUint32(nil, uint32(q.corr))
	if q.flexible && q.key != keyApiVersions {
		header = append(header, 0) // no tagged fields
	}
	return encode(header, resp)
}

// rewrite points every broker address a response names at the proxy's
// listener for that broker, and reports whether it changed any.
func (p *Proxy) rewrite(resp kmsg.Response) (bool, error) {
	if r, ok := resp.(*kmsg.ApiVersionsResponse); ok {
		return clampVersions(r), nil
	}
	if r, ok := resp.(*kmsg.DescribeQuorumResponse); ok {
		return p.rewriteQuorum(r)
	}
	if r, ok := resp.(*kmsg.MetadataResponse); ok {
		for _, t := range r.Topics {
			if t.Topic != nil {
				p.learnTopic(t.TopicID, *t.Topic)
			}
		}
	}
	changed := false
	for _, a := range brokerAddrs(resp) {
		if *a.host == "" || *a.port <= 0 {
			continue // a coordinator not found, a broker unknown
		}
		h, port, err := p.proxyAddr(*a.host, *a.port)
		if err != nil {
			return false, err
		}
		*a.host, *a.port, changed = h, port, true
	}
	return changed, nil
}

// brokerAddrs are the broker addresses a response names, to rewrite in
// place.
func brokerAddrs(resp kmsg.Response) []hostPort {
	var addrs []hostPort
	add := func(host *string, port *int32) { addrs = append(addrs, hostPort{host, port}) }
	switch r := resp.(type) {
	case *kmsg.MetadataResponse:
		for i := range r.Brokers {
			add(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.FindCoordinatorResponse:
		add(&r.Host, &r.Port)
		for i := range r.Coordinators {
			add(&r.Coordinators[i].Host, &r.Coordinators[i].Port)
		}
	case *kmsg.DescribeClusterResponse:
		for i := range r.Brokers {
			add(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.ProduceResponse:
		for i := range r.Brokers {
			add(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.FetchResponse:
		for i := range r.Brokers {
			add(&r.Brokers[i].Host, &r.Brokers[i].Port)
		}
	case *kmsg.ShareFetchResponse:
		for i := range r.NodeEndpoints {
			add(&r.NodeEndpoints[i].Host, &r.NodeEndpoints[i].Port)
		}
	case *kmsg.ShareAcknowledgeResponse:
		for i := range r.NodeEndpoints {
			add(&r.NodeEndpoints[i].Host, &r.NodeEndpoints[i].Port)
		}
	}
	return addrs
}

type hostPort struct {
	host *string
	port *int32
}

// clampVersions keeps the APIs and versions a broker offers to those the
// proxy knows (kmsg's): the proxy refuses any other, so a client that
// follows the broker's offer never sends one (a broker newer than kmsg
// offers versions the proxy could not read).
func clampVersions(r *kmsg.ApiVersionsResponse) bool {
	keys, changed := r.ApiKeys[:0], false
	for _, k := range r.ApiKeys {
		req := kmsg.RequestForKey(k.ApiKey)
		if req == nil || k.MinVersion > req.MaxVersion() {
			changed = true
			continue
		}
		if k.MaxVersion > req.MaxVersion() {
			k.MaxVersion, changed = req.MaxVersion(), true
		}
		keys = append(keys, k)
	}
	r.ApiKeys = keys
	return changed
}

// unsupportedVersion is the broker's answer to an ApiVersions of a version
// it does not know: v0, UNSUPPORTED_VERSION, and the versions of
// ApiVersions it knows, for the client to ask again.
func unsupportedVersion() kmsg.Response {
	r := kmsg.NewPtrApiVersionsResponse()
	r.ErrorCode = errUnsupportedVersion
	k := kmsg.NewApiVersionsResponseApiKey()
	k.ApiKey, k.MaxVersion = keyApiVersions, kmsg.NewPtrApiVersionsRequest().MaxVersion()
	r.ApiKeys = append(r.ApiKeys, k)
	return r
}

// rewriteQuorum rewrites a DescribeQuorum's controller listeners (uint16
// ports).
func (p *Proxy) rewriteQuorum(r *kmsg.DescribeQuorumResponse) (bool, error) {
	changed := false
	for i := range r.Nodes {
		for j := range r.Nodes[i].Listeners {
			l := &r.Nodes[i].Listeners[j]
			if l.Host == "" || l.Port == 0 {
				continue
			}
			addr, err := p.listenerFor(net.JoinHostPort(l.Host, strconv.Itoa(int(l.Port))))
			if err != nil {
				return false, err
			}
			h, ps, _ := net.SplitHostPort(addr)
			n, _ := strconv.Atoi(ps)
			l.Host, l.Port, changed = h, uint16(n), true
		}
	}
	return changed, nil
}

// RecordSize is what the event keeps: its records (decompressed), counts
// and partitions (fault.Sized).
func (e Event) RecordSize() (int, bool) {
	n := len(e.TransactionalID) + len(e.Group) + len(e.Unread) + 2*len(e.DeliveryCounts)
	for _, r := range e.Records {
		n += 120 + len(r.Topic) + len(r.Key) + len(r.Value)
		for _, h := range r.Headers {
			n += 40 + len(h.Key) + len(h.Value)
		}
	}
	for _, p := range e.Partitions {
		n += 64 + len(p.Topic) + 64*len(p.Acks)
	}
	return n, e.Fault != ""
}
