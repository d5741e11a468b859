// Package history judges one scenario as a whole, the way Jepsen's queue
// checkers judge a history rather than single operations. The runner records
// every commit, publish, delivery, outcome and ack the steps report (Op),
// reads the final state of the databases and the broker (State), and Check
// returns every invariant the pair breaks, each with a minimal witness.
package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/state"
)

// Kinds of Op.
const (
	Commit  = "committed" // the producer committed the event (journal + outbox)
	Publish = "published" // an entry of the event reached the broker
	Purge   = "purged"    // a consumer's inbox rows were deleted
	Pass    = "pass"      // a consume or claim step of a consumer began (TakesOver says which)
	// Any other Kind is the outcome of one delivery: applied, duplicate,
	// conflict, failed, deferred.
	Applied = "applied"
	// Delivered is a delivery a protocol proxy saw on the wire to a team's
	// consumer: its outcome is the consumer's secret, its ack is not.
	Delivered = "delivered"
)

// Op is one thing that happened, in the order it happened.
type Op struct {
	Step     string // where: "file:line:col (step)"
	StepN    int    // index of the step in the scenario
	Kind     string
	EventID  string
	EntryID  string
	Consumer string // deliveries and purges
	Model    string // deliveries: the read model the consumer updates
	Payload  string // commits, publishes and deliveries
	Acked    bool   // deliveries: XACKed after handling
	DLQ      bool   // deliveries: moved to the dead-letter stream
	Nacked   bool   // deliveries: given back to the broker for redelivery
	// TakesOver: a pass that takes over entries delivered before (a claim),
	// not one that reads new entries.
	TakesOver bool
	// Republish: a publish on purpose (a replay, a reconcile, a raw
	// publish), not a relay's.
	Republish bool
	// At and Proc place an op a team's broker proxy saw: when, and which
	// service process (zero for an op a step reported).
	At   time.Time
	Proc Proc
}

// Sum is a projection row or the inbox's sum for one currency.
type Sum = state.Sum

// Consumer is the final state of one consumer id.
type Consumer struct {
	Inbox      map[string]string // event id → payload (canonical JSON)
	Projection map[string]Sum    // currency → projection row
	InboxSums  map[string]Sum    // currency → sums over the inbox payloads
	Pending    int64             // entries delivered, not acked
	HasPending bool              // the broker can count them
	// Rows are the inbox rows as stored (a team's system: Inbox is then
	// filled from them, each traced to the business event it records).
	Rows []state.InboxRow
	// Stray are the keys of Rows that trace to no committed event (phantom
	// rows): still an effect, so an ack of their delivery is not one
	// without effect.
	Stray map[string]bool
	// Untaken are the entries still pending once a team's system settled
	// that no live consumer took again meanwhile; Undecided those settling
	// could not decide about (not idle long enough yet).
	Untaken, Undecided []Pending
	// Reach is what the broker itself says of the entries it holds for
	// this group (broker.Reacher; HasReach: it said anything). Lost and
	// stranded are then judged on it, not on the acks the history saw.
	Reach    []broker.GroupEntry
	HasReach bool
}

// State is the end of the scenario as the databases and the broker hold it.
type State struct {
	Outbox      map[string]string // committed event id → payload
	Unpublished map[string]bool   // committed, still waiting in the outbox (with CDC: in the replication slot)
	// CDC: the relay reads a replication slot; Unpublished says what the
	// slot still holds, and "published" means the slot confirmed past it.
	CDC         bool
	Stream      map[string]int  // event id → entries the broker still holds
	HasStream   bool            // the broker can list its entries
	DeadLetters map[string]bool // event ids in the dead-letter stream
	// LiveKeeps: on this broker no claim takes over what a live worker
	// holds (broker.LiveKeeper), so a claim is no way back for it.
	LiveKeeps bool
	Consumers map[string]*Consumer
	// Projections are the read models: name → currency → projection row.
	Projections map[string]map[string]Sum
	// Books are the producer's own records beside the outbox; nil when not
	// read, and then unbalanced is not judged.
	Books *Books
	// Strangers are the consumer ids a team's inbox holds rows for that
	// no consumer group of the run read as: the inbox.consumer mapping
	// names another column than the group, or a service wrote as another id.
	Strangers []string
	// Team is set on a team's system: its consumer is judged from the
	// final state (see team.go).
	Team *Team
	// NotJudged are the invariants (or parts of one) the evidence could
	// not decide, each with why: never reported as "no violation".
	NotJudged map[string]string
	// Inapplicable are the invariants this kind of run can never judge,
	// each with why (unbalanced on a team's system, whose books are not
	// mapped; stuck on the reference pipeline, where no process runs on
	// its own): said once in the docs and under -v, not as a gap of one
	// scenario.
	Inapplicable map[string]string
	// Applied are, per consumer id, its inbox rows in the order it applied
	// them; nil when that order cannot be read (see Order).
	Applied map[string][]state.AppliedRow
	// OrderOf reads an event's aggregate key and version from its
	// committed payload; nil when they are not mapped.
	OrderOf func(payload string) (aggregate string, version int64, ok bool)
	// OrderPaths say where OrderOf reads the aggregate and the version,
	// as the reasons order is not judged name them: "event.aggregate
	// (data.account)"; "" on the reference pipeline (its payload's
	// aggregate and version fields).
	OrderPaths [2]string
}

// Books is what the producer's transaction writes besides the outbox row:
// one journal row, two ledger entries and two balance updates per transfer.
type Books struct {
	Journal    map[string]bool // event ids with a journal row
	Unbalanced []string        // currencies whose balances do not sum to zero
	Drift      []string        // "account/currency" whose balance is not the sum of its ledger entries
}

// The invariants, by the name a scenario uses in expect_violations.
const (
	Lost               = "lost"
	DoubleApplied      = "double_applied"
	Phantom            = "phantom"
	AckedWithoutEffect = "acked_without_effect"
	ProjectionMismatch = "projection_mismatch"
	Stranded           = "stranded"
	DoublePublished    = "double_published"
	Unbalanced         = "unbalanced"
	Stuck              = "stuck"
	OutOfOrder         = "out_of_order"
	Gap                = "gap"
)

// Invariants documents every invariant, for validation and the reference.
var Invariants = map[string]string{
	Lost:               "a committed event no consumer path can still deliver: not applied, not waiting in the outbox, not in the stream unacked, not dead-lettered",
	DoubleApplied:      "a read model received the same event id more than once (one consumer twice, or two consumer ids writing it)",
	Phantom:            "a consumer applied an event the producer never committed, or with another payload than the committed one",
	AckedWithoutEffect: "an entry was acked while the consumer holds no durable effect of its event (no inbox row, not dead-lettered)",
	ProjectionMismatch: "a read model differs from the sum over the inbox of the consumer(s) writing it",
	DoublePublished:    "the same event published more than once with nothing that could explain a retry: on the reference pipeline, by one relay step (all its concurrent relays together); on a team's system, by one service process within one pass (no fault struck it between), or by two relay processes with no fault struck either of them, neither ended, the producer database answered neither with an error and no step faulted a server between the two publishes (two relays raced for one outbox row; a fault on another service, such as the consumer, explains nothing); a publish again after one of those is at-least-once",
	Unbalanced:         "the producer's books do not hold together: a journal row without its event's outbox row or the reverse (a produce committed in part), a currency whose balances do not sum to zero, or a balance that differs from its ledger entries",
	Stuck:              "a team's running system stopped making progress: a committed event its consumer never applied although a consumer of its group ran, and the broker still offered it, for the whole settle (or still unpublished while a relay ran); re-taken and failed again is not progress, a live process that stopped reading is not either",
	OutOfOrder:         "per consumer and aggregate, a later version applied before an earlier one: the consumer's inbox, in its apply order (inbox.applied_order), holds the aggregate's versions out of order",
	Gap:                "per consumer and aggregate, a version applied while an earlier version of the same aggregate, committed by the producer, was never applied by that consumer (not applied at the end; a dead-lettered one counts as never applied)",
	Stranded:           "an entry left pending at the end whose event the consumer never applied, although the consumer read on afterwards and never claimed: only a claim would deliver it again (where a live worker keeps what it holds, as on RabbitMQ or in a classic Kafka group, only its nack or its end)",
}

// InvariantNames lists the invariants, sorted.
func InvariantNames() []string {
	names := make([]string, 0, len(Invariants))
	for n := range Invariants {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// TeamOnly are the invariants only a team's running system can break:
// the reference pipeline runs no process on its own between its steps.
var TeamOnly = map[string]bool{Stuck: true}

// ReferenceInvariants are the invariants judged on the reference
// pipeline (every one but TeamOnly), sorted.
func ReferenceInvariants() []string {
	return slices.DeleteFunc(InvariantNames(), func(n string) bool { return TeamOnly[n] })
}

// Violation is one broken invariant with its witness.
type Violation struct {
	Invariant string
	Consumer  string
	EventID   string
	Detail    string
	Witness   []Op // the ops that show it, in order
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", v.Invariant)
	if v.Consumer != "" {
		fmt.Fprintf(&b, "consumer %s, ", v.Consumer)
	}
	if v.EventID != "" {
		fmt.Fprintf(&b, "event %s: ", v.EventID)
	}
	b.WriteString(v.Detail)
	for _, op := range v.Witness {
		fmt.Fprintf(&b, "\n    %s", op)
	}
	return b.String()
}

func (op Op) String() string {
	s := op.Step + ": " + op.Kind
	if op.EntryID != "" {
		s += " entry " + op.EntryID
	}
	if op.Consumer != "" && op.Kind != Commit && op.Kind != Publish {
		s += " by " + op.Consumer
	}
	switch {
	case op.DLQ:
		s += ", dead-lettered"
	case op.Acked:
		s += ", acked"
	}
	return s
}
