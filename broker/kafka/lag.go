package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/broker"
)

// GroupID is the Kafka group of consumer group g on this topic: the name
// the Topic's own workers join, and the one a team's consumer is told
// (${group}), so that the runner reads its committed offsets and a
// leftover is found by `runner clean`.
func (t *Topic) GroupID(g string) string { return t.groupID(g) }

// Lag counts, for every classic group of this topic (the Topic's own and
// any other named TOPIC.CONSUMER, a team's), what a read_committed consumer
// of the group can still get: the entries (committedLog) at or after the
// group's committed offset on their partition, all of a partition's where
// the group committed nothing (what a group reading from the earliest
// record has yet to do). Transaction markers and aborted records are no
// lag, so a group that committed up to the end offset (past a trailing
// commit marker) has none; records of a transaction still open are lag only
// once it commits. A record a worker holds uncommitted counts: Kafka
// acknowledges by committing past it. Committed offsets come from
// OffsetFetch (https://kafka.apache.org/documentation/#design_consumerposition).
// Groups are keyed by consumer id (the name after "TOPIC.").
func (t *Topic) Lag(ctx context.Context) (map[string]int64, error) {
	listed, err := t.adm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka list groups: %w", err)
	}
	recs, err := t.committedLog(ctx, t.name)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, g := range listed.Groups() {
		c, ok := strings.CutPrefix(g, t.name+".")
		if !ok || c == "" {
			continue
		}
		committed, err := t.adm.FetchOffsetsForTopics(ctx, g, t.name)
		if err == nil {
			err = committed.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("kafka fetch offsets of group %s: %w", g, err)
		}
		var lag int64
		for _, r := range recs {
			if o, ok := committed.Lookup(t.name, r.Partition); !ok || r.Offset >= o.At {
				lag++
			}
		}
		out[c] = lag
	}
	return out, nil
}

// Adopt makes the groups of consumer ids gs the Topic's to delete: a team's
// consumer joins TOPIC.CONSUMER itself, and its group would outlive the
// scenario otherwise.
func (t *Topic) Adopt(gs ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range gs {
		t.adopted = append(t.adopted, t.groupID(g))
	}
}

// Placeholders tell a team's services the topic and, for consumer, its
// group TOPIC.CONSUMER. The team's consumer joins that group itself: the
// Topic adopts it, to delete it with the scenario's topic.
func (t *Topic) Placeholders(_ context.Context, consumer string) (map[string]string, error) {
	t.Adopt(consumer)
	return map[string]string{"topic": t.Name(), "destination": t.Name(), "group": t.GroupID(consumer)}, nil
}

var _ broker.Named = (*Topic)(nil)

// evict removes every member of group id from it (LeaveGroup by member
// id, KIP-345): a team's consumer killed by the drill leaves its member
// behind for its own session timeout, which may be minutes, and a group
// with members cannot be deleted.
func (t *Topic) evict(ctx context.Context, id string) error {
	ds, err := t.adm.DescribeGroups(ctx, id)
	if err != nil {
		return fmt.Errorf("kafka describe group %s: %w", id, err)
	}
	d, ok := ds[id]
	if !ok || d.Err != nil || len(d.Members) == 0 {
		return nil
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = id
	for _, m := range d.Members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID, lm.InstanceID = m.MemberID, m.InstanceID
		req.Members = append(req.Members, lm)
	}
	resp, err := req.RequestWith(ctx, t.prod)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		return fmt.Errorf("kafka remove the members of group %s: %w", id, err)
	}
	return nil
}

// deleteAdopted deletes the adopted groups, their members removed first.
func (t *Topic) deleteAdopted(ctx context.Context, ids []string) error {
	var errs []error
	for _, id := range ids {
		errs = append(errs, t.evict(ctx, id))
	}
	return errors.Join(append(errs, t.deleteGroups(ctx, 5*time.Second, ids...))...)
}
