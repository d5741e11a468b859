package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

const (
	// claimWait bounds a claim's fetch once the group has settled and no
	// record is known to be on its way: one fetch's own wait.
	claimWait = 100 * time.Millisecond
	// groupLook is how often a claim looks at the group while it waits:
	// the coordinator tells a rebalance's end to the members, not to
	// whoever watches.
	groupLook = 20 * time.Millisecond
)

// awaitGroup waits until the group has done what a claim waits for: it
// lists only members alive here (a worker that died without leaving is
// gone once its session ran out), it is stable, and the claimer's client
// holds what the group assigned it. False when that did not happen within
// the session and a margin: the group lists a member this process does not
// know (another process's: only its session tells whether it lives), or
// the group cannot be described.
func (t *Topic) awaitGroup(ctx context.Context, m *member) (bool, error) {
	deadline := time.Now().Add(t.opt.Session + rebalanceMargin)
	for {
		if t.groupSettled(ctx, m) {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, context.Cause(ctx)
		case <-time.After(groupLook):
		}
	}
}

// groupSettled reports whether the group, as the coordinator describes it,
// is stable with only live members, and the claimer's client holds what
// it was assigned.
func (t *Topic) groupSettled(ctx context.Context, m *member) bool {
	gid := t.groupID(m.key.group)
	ds, err := t.adm.DescribeGroups(ctx, gid)
	d, ok := ds[gid]
	if err != nil || !ok || d.Err != nil || d.State != "Stable" {
		return false
	}
	live := t.liveMembers(m.key.group)
	self, _ := m.cl.GroupMetadata()
	var mine []int32
	for _, mem := range d.Members {
		if !live[mem.MemberID] {
			return false // dead, its session not yet over; or not ours
		}
		if c, ok := mem.Assigned.AsConsumer(); ok && mem.MemberID == self {
			for _, tp := range c.Topics {
				if tp.Topic == t.name {
					mine = append(mine, tp.Partitions...)
				}
			}
		}
	}
	return m.owns(mine)
}

// liveMembers are the member ids of group's workers whose clients are
// open in this process.
func (t *Topic) liveMembers(group string) map[string]bool {
	out := map[string]bool{}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, m := range t.members {
		if id, _ := m.cl.GroupMetadata(); k.group == group && id != "" {
			out[id] = true
		}
	}
	for k, m := range t.txns {
		if id, _ := m.sess.Client().GroupMetadata(); k.group == group && id != "" {
			out[id] = true
		}
	}
	return out
}

// owns reports whether the member's client holds exactly ps, the
// partitions the group assigned it (its assignment callback has run, so
// what it expects to fetch is known).
func (m *member) owns(ps []int32) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(ps) != len(m.owned) {
		return false
	}
	for _, p := range ps {
		if !m.owned[p] {
			return false
		}
	}
	return true
}

// ownsAny reports whether the group gave the member any partition.
func (m *member) ownsAny() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.owned) > 0
}

// removeCrashed removes from their groups the static members that died
// without leaving, as an operator's admin command would: the drill is over,
// and a group with members cannot be deleted until their sessions ran out.
// One that came back (a restarted worker of the same name) left already.
func (t *Topic) removeCrashed(ctx context.Context) {
	t.mu.Lock()
	byGroup := map[string][]string{}
	for _, k := range t.crashed {
		byGroup[k.group] = append(byGroup[k.group], k.worker)
	}
	t.crashed = nil
	t.mu.Unlock()
	for g, workers := range byGroup {
		// An instance no longer in the group is refused one by one: nothing to do.
		_, _ = t.adm.LeaveGroup(ctx, kadm.LeaveGroup(t.groupID(g)).InstanceIDs(workers...))
	}
}
