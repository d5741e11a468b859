package broker

import (
	"context"
	"time"
)

// What a scenario's Broker may do beyond Broker, for the runner to tell
// its services and to read its state: the runner asks the value for one of
// these interfaces, never for its type, so that no broker is named outside
// its own directory.

// Named is a scenario's broker that tells a team's services the names of
// its objects, the placeholders its Kind lists (Kind.Placeholders): the
// very names the runner's own checks read.
type Named interface {
	// Placeholders are the values of its placeholders for a service
	// whose consumer id is consumer: where the relay publishes
	// (destination), the stream, topic, subject or exchange, and the
	// consumer's group or queue. A broker that must know of a group the
	// service joins itself (a Kafka topic deletes its groups with it)
	// learns of it here.
	Placeholders(ctx context.Context, consumer string) (map[string]string, error)
}

// Inspector is a scenario's broker whose consumer groups and pending
// entries are read one by one (Redis XINFO GROUPS and XPENDING): settling
// then sorts each pending entry a live service may still take, instead of
// waiting on a count of what a group has not finished with (Lagging).
type Inspector interface {
	// Groups are every consumer group of the stream, a team's included;
	// none while the stream does not exist.
	Groups(ctx context.Context) ([]Group, error)
	// PendingEntries are group's pending entries, with the event id each
	// carries.
	PendingEntries(ctx context.Context, group string) ([]PendingEntry, error)
}

// Group is one consumer group of the stream as the broker reports it.
type Group struct {
	Name    string
	Pending int64
	// Undelivered is how many entries the group has not been handed yet
	// (on Redis its lag, or, where Redis cannot tell it after a deletion,
	// whether the last entry is past the group's last-delivered id: 0 or
	// 1).
	Undelivered int64
	// LastDelivered is the id of the last entry handed to the group: a
	// later entry is still to come, an earlier one only if pending.
	LastDelivered string
}

// PendingEntry is one entry of a group's pending list.
type PendingEntry struct {
	ID         string
	Consumer   string // the worker that holds it
	Idle       time.Duration
	Deliveries int64
	EventID    string // the entry's event id; "" when the entry was deleted
}

// Lister is a scenario's broker that lists the entries it holds and which
// of them each group may still be handed (Redis): lost is then judged on
// that, not on a guess of which entries a retention limit or a consumer's
// deletion left.
type Lister interface {
	EntryList(ctx context.Context) ([]Entry, error)
	// Deliverable maps each group to the ids of entries it may still be
	// handed: those it holds pending and those past its last-delivered
	// id. A group that does not exist is left out.
	Deliverable(ctx context.Context, entries []Entry) (map[string]map[string]bool, error)
}

// Entry is one entry the stream holds.
type Entry struct{ ID, EventID string }

// Fielded is a scenario's broker whose entries carry the event id and the
// payload in fields a team names (a system file's stream: mapping, on a
// Kind with EntryFields): what the runner publishes and reads there then
// uses the team's fields.
type Fielded interface {
	UseFields(eventID, payload string)
}
