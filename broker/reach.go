package broker

import "context"

// Fate is what the broker says will become of one entry for one consumer
// group.
type Fate int

const (
	// Deliverable: the broker may still hand the entry to the group — it
	// is available, or a worker holds it under a lock that runs out.
	Deliverable Fate = iota + 1
	// Finished: the broker will never hand it to the group again; it was
	// acknowledged (by the worker, or by its client on its behalf) or
	// archived (by the broker, at its delivery limit).
	Finished
	// Undecided: the broker's state does not say which of the two.
	Undecided
)

func (f Fate) String() string {
	switch f {
	case Deliverable:
		return "deliverable"
	case Finished:
		return "finished"
	case Undecided:
		return "undecided"
	}
	return "Fate(?)"
}

// GroupEntry is one entry the broker holds, as one consumer group stands
// to it.
type GroupEntry struct {
	ID, EventID string
	Fate        Fate
	// Why is how the broker tells (for Finished) or why it cannot (for
	// Undecided), in words for a verdict.
	Why string
}

// Reacher is a broker whose own state tells, per consumer group, which of
// its entries the group may still be handed (Kafka share groups: the
// share-partition start offset). Where it does, lost and stranded are
// judged on it, not on which acknowledgements the runner sent: a client
// may acknowledge on the worker's behalf, and the broker may give up on an
// entry by itself.
type Reacher interface {
	// Reach lists the entries the broker holds as group stands to them;
	// ok is false when the broker keeps no such state for group (then the
	// runner's own record of acks decides, as for any other broker).
	Reach(ctx context.Context, group string) (entries []GroupEntry, ok bool, err error)
}
