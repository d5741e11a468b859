package kafka

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/proxy/fault"
)

// Boundary, Request and Reply are fault's (the reply of each operation
// is said at its constant below).
type Boundary = fault.Boundary

const Request, Reply = fault.Request, fault.Reply

// The broker-neutral operations, as every proxy has them.
const (
	// OpPublish is Produce; its reply is the Produce response (a request
	// with acks=0 has none).
	OpPublish = fault.OpPublish
	// OpDeliver is, at Request, a Fetch or ShareFetch request; at Reply, a
	// Fetch or ShareFetch response that hands the client records (counted
	// there: an empty long poll is no delivery).
	OpDeliver = fault.OpDeliver
	// OpAck is OffsetCommit, TxnOffsetCommit, ShareAcknowledge, or a
	// ShareFetch that accepts records; at Reply, its response.
	OpAck = fault.OpAck
)

// Trigger arms one fault at the Nth crossing of Op: a neutral operation,
// or an API by kmsg's name for it (Produce, Fetch, OffsetCommit,
// TxnOffsetCommit, EndTxn, JoinGroup, SyncGroup, ShareFetch,
// ShareAcknowledge, …). At Reply it holds the API's response.
//
// Topic matches a request that names the topic (by name, or by an id the
// proxy learned from a Metadata response; an EndTxn, the topics its
// transaction produced to); Group one that names the group (an EndTxn,
// its transaction's group from AddOffsetsToTxn). "" matches any.
//
// Error does not forward the request: the client gets a response with a
// real, retriable error: Produce NOT_ENOUGH_REPLICAS (the broker wrote
// nothing), Fetch FETCH_SESSION_ID_NOT_FOUND (NOT_LEADER_OR_FOLLOWER
// before v7), ShareFetch and ShareAcknowledge NOT_LEADER_OR_FOLLOWER, the
// commits, EndTxn and the group APIs COORDINATOR_NOT_AVAILABLE. At a
// delivery the response is replaced by that error: the client fetches
// again.
type Trigger struct {
	Boundary     Boundary
	Op           string
	Topic, Group string
	Nth          int // 1 = the first; 0 counts as 1
	fault.Action
}

func (t Trigger) String() string {
	var f []string
	if t.Topic != "" {
		f = append(f, "topic="+t.Topic)
	}
	if t.Group != "" {
		f = append(f, "group="+t.Group)
	}
	filter := ""
	if len(f) > 0 {
		filter = ", " + strings.Join(f, ", ")
	}
	return fmt.Sprintf("%s(%s%s) nth=%d do=%s", t.Boundary, t.Op, filter, max(t.Nth, 1), t.Action)
}

// keyByName is every API kmsg knows, by name.
var keyByName = lazy.Value("Kafka API keys by name", func() map[string]int16 {
	m := map[string]int16{}
	for k := int16(0); k < 200; k++ {
		if kmsg.RequestForKey(k) != nil {
			m[kmsg.NameForKey(k)] = k
		}
	}
	return m
})

// The APIs that name topics, groups, and those the proxy can answer with
// an error.
var (
	namesTopic = map[int16]bool{keyProduce: true, keyFetch: true, keyOffsetCommit: true, keyTxnOffsetCommit: true, keyEndTxn: true,
		keyShareFetch: true, keyShareAcknowledge: true}
	namesGroup = map[int16]bool{keyOffsetCommit: true, keyTxnOffsetCommit: true, keyEndTxn: true, keyAddOffsetsToTxn: true,
		keyJoinGroup: true, keyHeartbeat: true, keyLeaveGroup: true, keySyncGroup: true, keyConsumerGroupHeartbeat: true,
		keyShareGroupHeartbeat: true, keyShareFetch: true, keyShareAcknowledge: true}
	errorable = map[int16]bool{keyProduce: true, keyFetch: true, keyOffsetCommit: true, keyTxnOffsetCommit: true, keyEndTxn: true,
		keyJoinGroup: true, keyHeartbeat: true, keyLeaveGroup: true, keySyncGroup: true, keyShareFetch: true, keyShareAcknowledge: true}
)

// keys are the APIs an operation crosses.
func (t Trigger) keys() []int16 {
	switch t.Op {
	case OpPublish:
		return []int16{keyProduce}
	case OpDeliver:
		return []int16{keyFetch, keyShareFetch}
	case OpAck:
		return []int16{keyOffsetCommit, keyTxnOffsetCommit, keyShareAcknowledge, keyShareFetch}
	}
	if k, ok := keyByName()[t.Op]; ok {
		return []int16{k}
	}
	return nil
}

// Operations are the operations a trigger may name: the neutral ones,
// then every Kafka API kmsg knows, sorted (for a parser's "did you mean").
func Operations() []string {
	return append([]string{OpPublish, OpDeliver, OpAck}, slices.Sorted(maps.Keys(keyByName()))...)
}

// UnknownOperation is the error of an operation the proxy does not know.
func UnknownOperation(op string) error {
	return fmt.Errorf("unknown operation %q (want publish, deliver, ack or a Kafka API such as Produce)", op)
}

// Checked is a trigger Compile accepted: ArmChecked arms it as it is,
// never checking it again.
type Checked struct{ t Trigger }

// Compile is t checked (Check), for ArmChecked.
func (t Trigger) Compile() (Checked, error) {
	if err := t.check(); err != nil {
		return Checked{}, err
	}
	return Checked{t}, nil
}

// Check says what is wrong with a trigger (Arm refuses it): an unknown
// operation, a filter its API does not name, an error the proxy cannot
// answer.
func (t Trigger) Check() error { return t.check() }

// check says what is wrong with a trigger.
func (t Trigger) check() error {
	if err := t.checkOp(); err != nil {
		return err
	}
	return t.checkAction()
}

// checkAction says where duplicate and drop do not apply: a duplicate
// takes a Produce only (a Fetch hands records by offset, and a client
// skips an offset it has passed: a second copy would never reach it as a
// delivery); a drop takes a response.
func (t Trigger) checkAction() error {
	switch {
	case t.Do == fault.Duplicate && !slices.Equal(t.keys(), []int16{keyProduce}):
		return fmt.Errorf("do: duplicate applies on Kafka to a publish (Produce) only, not to %s: a client skips a fetched record at an offset it has passed, so a second copy never reaches it as a delivery", t.Op)
	case t.Do == fault.Drop && t.Boundary != Reply:
		return fmt.Errorf("do: drop loses a response: use reply(%s)", t.Op)
	}
	return nil
}

// checkOp says what is wrong with a trigger's boundary and operation.
func (t Trigger) checkOp() error {
	if t.Boundary != Request && t.Boundary != Reply {
		return fmt.Errorf("unknown boundary %v", t.Boundary)
	}
	keys := t.keys()
	if len(keys) == 0 {
		return UnknownOperation(t.Op)
	}
	for _, k := range keys {
		switch {
		case t.Topic != "" && !namesTopic[k] && len(keys) == 1:
			return fmt.Errorf("%s names no topic", name(k))
		case t.Group != "" && !namesGroup[k] && len(keys) == 1:
			return fmt.Errorf("%s names no group", name(k))
		case t.Do == fault.Error && !errorable[k]:
			return fmt.Errorf("the proxy cannot answer %s with an error (it can: Produce, Fetch, the commits, EndTxn, the group APIs, ShareFetch, ShareAcknowledge)", name(k))
		}
	}
	return nil
}

// atServer reports whether the trigger counts responses (deliveries),
// else requests.
func (t Trigger) atServer() bool { return t.Op == OpDeliver && t.Boundary == Reply }

// crossing is one request (or, for a delivery, its response) as the
// triggers see it.
type crossing struct {
	key        int16
	fromServer bool
	topics     []string
	unresolved bool // a topic named by an id the proxy never learned
	group      string
	groupKnown bool
	accepts    bool   // a ShareFetch that accepts records
	unread     string // why the proxy could not read the request
}

// matches reports whether a crossing is the trigger's (its filters
// aside).
func (t Trigger) matches(x crossing) bool {
	if x.fromServer != t.atServer() {
		return false
	}
	if t.Op == OpAck && x.key == keyShareFetch && !x.accepts && x.unread == "" {
		return false
	}
	for _, k := range t.keys() {
		if k == x.key {
			return true
		}
	}
	return false
}

// filter applies Topic and Group; undecided says why it cannot tell.
func (t Trigger) filter(x crossing) (ok bool, undecided string) {
	switch {
	case (t.Topic != "" || t.Group != "") && x.unread != "":
		return false, x.unread
	case t.Topic != "" && x.unresolved:
		return false, fmt.Sprintf("a %s names a topic by an id the proxy never saw in a Metadata response", name(x.key))
	case t.Group != "" && !x.groupKnown:
		return false, fmt.Sprintf("a %s names no group", name(x.key))
	}
	topicOK := t.Topic == ""
	for _, n := range x.topics {
		topicOK = topicOK || n == t.Topic
	}
	return topicOK && (t.Group == "" || t.Group == x.group), ""
}

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger Trigger
}
