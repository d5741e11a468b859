package kafka

import (
	"sync"
	"time"
)

// MaxGroups bounds the consumer groups whose JoinGroup timeouts the proxy
// keeps: a drill's services join a handful; past the cap a group's are
// not kept.
const MaxGroups = 64

// Group is what the JoinGroup requests of one consumer group announced to
// the broker: the longest session and rebalance timeouts any member asked
// for. The coordinator removes a member whose heartbeats stop for its
// session timeout, and waits up to the rebalance timeout for the members
// to rejoin (https://kafka.apache.org/documentation/#consumerconfigs_session.timeout.ms).
type Group struct {
	Name               string
	Session, Rebalance time.Duration // Rebalance 0: only v0 JoinGroups, which announce none
}

// groups are the consumer groups seen joining, in the order first seen.
type groups struct {
	mu    sync.Mutex
	by    map[string]int
	order []Group
}

// join keeps what a JoinGroup the proxy forwarded announced.
func (gs *groups) join(q *request) {
	if q.key != keyJoinGroup || q.unread != "" || q.group == "" {
		return
	}
	ms := func(n int32) time.Duration { return time.Duration(max(n, 0)) * time.Millisecond }
	gs.mu.Lock()
	defer gs.mu.Unlock()
	i, ok := gs.by[q.group]
	if !ok {
		if len(gs.order) >= MaxGroups {
			return
		}
		if gs.by == nil {
			gs.by = map[string]int{}
		}
		i = len(gs.order)
		gs.by[q.group] = i
		gs.order = append(gs.order, Group{Name: q.group})
	}
	g := &gs.order[i]
	g.Session, g.Rebalance = max(g.Session, ms(q.session)), max(g.Rebalance, ms(q.rebalance))
}

// Groups are the consumer groups whose members' JoinGroup requests
// crossed the proxy (at most MaxGroups), in the order first seen.
func (p *Proxy) Groups() []Group {
	p.groups.mu.Lock()
	defer p.groups.mu.Unlock()
	return append([]Group(nil), p.groups.order...)
}
