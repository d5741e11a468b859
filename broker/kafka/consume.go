package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/broker"
)

const (
	// settle bounds how long a poll waits for records it knows are there:
	// after the member was given a partition with a backlog (the client
	// first loads the committed offset) or after it sought back.
	settle = 3 * time.Second
	// joinWait bounds the wait for a new member to join its group.
	joinWait = 15 * time.Second
	// rebalanceMargin is how long past the session a claim waits for the
	// group to hand a dead member's partitions on.
	rebalanceMargin = 2 * time.Second
)

type memberKey struct{ group, worker string }

// member is one worker of a group: its own client, and what a real
// consumer keeps beside it: the records it was handed and has neither
// committed nor given back (held), and the offsets it committed.
type member struct {
	t      *Topic
	key    memberKey
	cl     *kgo.Client
	joined chan struct{} // closed on the first assignment (possibly empty)
	once   sync.Once
	expect atomic.Bool // records are known to be on their way: the next poll waits for them

	ackMu   sync.Mutex
	refused map[int32]error // share acknowledgements that did not take, by partition (noteAcks)
	ackSeq  sync.Mutex      // one flush at a time: what noteAcks hears is of that flush

	polling atomic.Bool // a poll is under way: what the client buffers is the worker's (stray.go)
	back    atomic.Bool // the server came back since the last poll (ServerBack): catch up first
	strayMu sync.Mutex
	strays  map[*kgo.Record]bool // what the client buffered while no poll ran, true once released (stray.go)

	mu        sync.Mutex
	held      map[int32]map[int64]*kgo.Record
	committed map[int32]int64
	// acked is, per partition, one past the newest offset acked: what a
	// commit may reach once no older record is held, even when that ack
	// came while an older record was still held.
	acked map[int32]int64
	// owned are the partitions the group assigned the member, as its
	// client's callbacks last heard
	owned map[int32]bool
}

// clientBorn runs between a member's NewClient and the pause of its topic:
// a test's stand-in for the goroutine being descheduled there.
var clientBorn = func() {}

// member returns the worker's client in group, creating and joining it on
// first use.
func (t *Topic) member(ctx context.Context, group, worker string) (*member, error) {
	k := memberKey{group, worker}
	t.mu.Lock()
	m := t.members[k]
	if m == nil {
		m = &member{t: t, key: k, joined: make(chan struct{}), held: map[int32]map[int64]*kgo.Record{}, committed: map[int32]int64{}, acked: map[int32]int64{}, owned: map[int32]bool{}}
		opts := t.memberOpts(m)
		if !slices.Contains(t.groups, group) {
			if t.opt.Share {
				if err := t.startAtEarliest(ctx, group); err != nil {
					t.mu.Unlock()
					return nil, err
				}
			}
			t.groups = append(t.groups, group)
		}
		if t.opt.Share { // no assignment to wait for: the broker hands out records
			opts = t.shareOpts(m)
			if n, err := t.Entries(ctx); err != nil || n > 0 {
				m.expect.Store(true) // joining takes a heartbeat before the first fetch
			}
			m.once.Do(func() { close(m.joined) })
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.mu.Unlock()
			return nil, fmt.Errorf("kafka client for %s/%s: %w", group, worker, err)
		}
		// Fetch only while polling (pollOnce), from the start: the topic
		// is added once paused. A client given it at NewClient may fetch
		// before a pause after NewClient returns; in a share group the
		// broker then acquires records for a worker that is not reading
		// (a stray, stray.go). When strays were released at once, a
		// worker's first read saw its record on its second delivery (in
		// CI, under load).
		clientBorn()
		cl.PauseFetchTopics(t.name)
		cl.AddConsumeTopics(t.name)
		m.cl = cl
		t.members[k] = m
	}
	t.mu.Unlock()
	select {
	case <-m.joined:
		return m, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-time.After(joinWait):
		return nil, fmt.Errorf("kafka: worker %s did not join group %s within %s", worker, t.groupID(group), joinWait)
	}
}

// memberOpts: a static member (group.instance.id = the worker) of the
// topic's group that commits only when told and starts a new group at the
// topic's first record.
func (t *Topic) memberOpts(m *member) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(t.seeds...),
		kgo.ConsumerGroup(t.groupID(m.key.group)), // the topic is added paused (member)
		kgo.InstanceID(m.key.worker),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(t.opt.Session),
		kgo.HeartbeatInterval(t.opt.Session / 4),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(ctx context.Context, _ *kgo.Client, ps map[string][]int32) {
			if len(ps[t.name]) > 0 && m.backlog(ctx, ps[t.name]) {
				m.expect.Store(true)
			}
			m.own(ps[t.name]) // after expect: a claim that sees them owned knows what to wait for
			m.once.Do(func() { close(m.joined) })
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { m.forget(ps[t.name]) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, ps map[string][]int32) { m.forget(ps[t.name]) }),
	}
}

// backlog reports whether the group's committed offsets on partitions ps
// are short of their ends: the new owner has records to fetch.
func (m *member) backlog(ctx context.Context, ps []int32) bool {
	t := m.t
	start, end, err := t.bounds(ctx, t.name)
	if err != nil {
		return true // waiting for nothing costs time, missing records costs truth
	}
	committed, err := t.adm.FetchOffsets(ctx, t.groupID(m.key.group))
	if err != nil {
		return true
	}
	for _, p := range ps {
		at := start[p]
		if o, ok := committed.Lookup(t.name, p); ok && o.At >= 0 {
			at = o.At
		}
		if at < end[p] {
			return true
		}
	}
	return false
}

// forget drops what the member held on partitions it no longer owns: the
// group will hand them to another member from the committed offset.
func (m *member) forget(ps []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		delete(m.held, p)
		delete(m.acked, p)
		delete(m.owned, p)
	}
}

// own records partitions the group assigned the member.
func (m *member) own(ps []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		m.owned[p] = true
	}
}

// poll hands the member up to count records (count <= 0: all there are),
// waiting at most wait for the first (longer when some are known to be on
// their way); with count <= 0 it polls on until it has caught up with the
// end of its partitions.
func (m *member) poll(ctx context.Context, count int, wait time.Duration) ([]broker.Delivery, error) {
	// Strays other members of a share group gave back are on their way
	// to a member, maybe this one: wait for them as for a redelivery.
	// Given back before the wait starts, they have all of it.
	released := m.t.opt.Share && m.releaseOthersStrays(ctx)
	if m.expect.Swap(false) || released {
		wait = max(wait, settle)
	}
	out, err := m.pollOnce(ctx, count, wait)
	if err != nil || len(out) == 0 {
		return out, err
	}
	if count > 0 || m.t.opt.Share {
		// A share member's next poll would accept what this one handed
		// out and the worker has not settled yet: one poll per read.
		return out, nil
	}
	for deadline := time.Now().Add(settle); time.Now().Before(deadline); {
		if behind, err := m.behind(ctx, out); err != nil || !behind {
			return out, err
		}
		more, err := m.pollOnce(ctx, 0, 200*time.Millisecond)
		if err != nil {
			return out, err
		}
		out = append(out, more...)
	}
	return out, nil
}

// pollOnce is one PollRecords, recording what it hands out as held.
//
// The worker fetches only while it polls: between polls its topic is
// paused and what a fetch brought beyond the records handed out is dropped
// (a seek past the last one), so every poll gets what the broker holds at
// that moment — a record deleted meanwhile is gone. (The Java consumer
// fetches ahead; there a record fetched before a deletion may still be
// processed.)
func (m *member) pollOnce(ctx context.Context, count int, wait time.Duration) ([]broker.Delivery, error) {
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	recs, errs, err := m.pollRecords(ctx, pctx, count)
	if err != nil {
		return nil, err
	}
	if !m.t.opt.Share && len(recs) > 0 {
		defer m.seekPast(recs)
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("kafka poll %s as %s/%s: %w", m.t.name, m.key.group, m.key.worker, errors.Join(errs...))
	}
	return m.hold(recs), nil
}

// pollRecords is one PollRecords within pctx, the topic resumed only
// meanwhile; for a share member, again while all it brought were strays
// given back for another member (stray.go), and recs without those. Errs
// are the fetches' errors other than pctx's end.
func (m *member) pollRecords(ctx, pctx context.Context, count int) (recs []*kgo.Record, errs []error, err error) {
	for {
		m.polling.Store(true)
		m.cl.ResumeFetchTopics(m.t.name)
		fs := m.cl.PollRecords(pctx, count)
		m.polling.Store(false) // first: what a fetch brings after the poll is a stray
		m.cl.PauseFetchTopics(m.t.name)
		if err := m.flushShareAcks(ctx); err != nil {
			// The client took these as handed out: given back, or its
			// next poll would accept them unseen.
			m.cl.MarkAcks(kgo.AckRelease, m.takeStrays(fs.Records())...)
			return nil, nil, err
		}
		var rejoin bool
		fs.EachError(func(_ string, _ int32, err error) {
			switch {
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			case rejoining(err):
				rejoin = true
			default:
				errs = append(errs, err)
			}
		})
		all := fs.Records()
		if rejoin && len(all) == 0 && len(errs) == 0 && pctx.Err() == nil {
			// The client rejoins on its own: poll on within the wait.
			select {
			case <-pctx.Done():
			case <-time.After(groupLook):
			}
			continue
		}
		if !m.t.opt.Share {
			return all, errs, nil
		}
		// Strays given back for another member are left out: the broker
		// hands them out again, maybe to this worker, on a later fetch.
		if recs = m.takeStrays(all); len(recs) > 0 || len(all) == 0 || pctx.Err() != nil {
			return recs, errs, nil
		}
	}
}

// rejoining reports whether err is the client telling its poll that the
// group session ended for a reason it recovers from by joining again (a
// coordinator that forgot the member, a generation that moved on, a
// rebalance under way); it rejoins in the background.
func rejoining(err error) bool {
	var gs *kgo.ErrGroupSession
	if !errors.As(err, &gs) {
		return false
	}
	return errors.Is(gs.Err, kerr.UnknownMemberID) || errors.Is(gs.Err, kerr.IllegalGeneration) || errors.Is(gs.Err, kerr.RebalanceInProgress)
}

// hold records recs as handed to the worker and not yet settled.
func (m *member) hold(recs []*kgo.Record) []broker.Delivery {
	var out []broker.Delivery
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		if m.held[r.Partition] == nil {
			m.held[r.Partition] = map[int64]*kgo.Record{}
		}
		m.held[r.Partition][r.Offset] = r
		out = append(out, broker.Delivery{ID: entryID(r.Partition, r.Offset), EventID: string(r.Key), Payload: string(r.Value), Deliveries: int(r.DeliveryCount())})
	}
	return out
}

// next is, per partition, the offset after the last of ds.
func next(ds []broker.Delivery) map[int32]int64 {
	pos := map[int32]int64{}
	for _, d := range ds {
		p, off, err := parseEntryID(d.ID)
		if err == nil {
			pos[p] = max(pos[p], off+1)
		}
	}
	return pos
}

// seekPast moves the fetch position of each partition of recs to just
// after its last record, dropping what the client fetched beyond.
//
// franz-go ignores a SetOffsets to the position the client already
// consumed up to, buffered records and all; so the position is first set
// one back (to the last record handed out, a valid offset) and then past
// it: each set drops what was fetched for the old position.
func (m *member) seekPast(recs []*kgo.Record) {
	pos := map[int32]int64{}
	for _, r := range recs {
		pos[r.Partition] = max(pos[r.Partition], r.Offset+1)
	}
	back, to := map[int32]kgo.EpochOffset{}, map[int32]kgo.EpochOffset{}
	for p, off := range pos {
		back[p] = kgo.EpochOffset{Epoch: -1, Offset: off - 1}
		to[p] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	m.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{m.t.name: back})
	m.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{m.t.name: to})
}

// behind reports whether a partition of ds has records past the last
// handed out.
func (m *member) behind(ctx context.Context, ds []broker.Delivery) (bool, error) {
	_, end, err := m.t.bounds(ctx, m.t.name)
	if err != nil {
		return false, err
	}
	for p, off := range next(ds) {
		if off < end[p] {
			return true, nil
		}
	}
	return false, nil
}

// Read polls as worker of group: the records the group's partitions
// assigned to it hold past its position, waiting at most block when none
// are new. A worker reading a group for the first time joins it first.
func (t *Topic) Read(ctx context.Context, group, worker string, count int, block time.Duration) ([]broker.Delivery, error) {
	m, err := t.member(ctx, group, worker)
	if err == nil {
		err = m.catchUp(ctx)
	}
	if err != nil {
		return nil, err
	}
	return m.poll(ctx, count, block)
}

// ServerBack marks every worker's client as having to catch up with the
// server that came back (broker.Comeback).
func (t *Topic) ServerBack() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.members {
		m.back.Store(true)
	}
}

// catchUp, once after the server came back, waits until the group has the
// member again as the coordinator describes it: a coordinator that forgot
// the group (kfake keeps no group across a restart) answers the member's
// heartbeat with UNKNOWN_MEMBER_ID, and the client rejoins under a new
// member id. Then, as after a first join, the next poll waits for what its
// partitions still hold past the group's committed offsets, which it
// fetches over a new connection. Without this, a poll right after the
// restart found nothing and the one after it failed on the rejoin.
func (m *member) catchUp(ctx context.Context) error {
	if !m.back.Swap(false) || m.t.opt.Share {
		return nil
	}
	if _, err := m.t.awaitGroup(ctx, m); err != nil {
		return err
	}
	var owned []int32
	m.mu.Lock()
	for p := range m.owned {
		owned = append(owned, p)
	}
	m.mu.Unlock()
	if len(owned) > 0 && m.backlog(ctx, owned) {
		m.expect.Store(true)
	}
	return nil
}

// Claim polls as worker once the group has handed it what it will: the
// partitions of a member that died without leaving come after its session
// ran out, and those of a live member never. What it gets is everything
// after the group's committed offset. minIdle plays no part (ClaimByIdle
// is not declared). A group it cannot judge (a member of another process)
// it waits out for the session and a margin, as a fixed wait.
func (t *Topic) Claim(ctx context.Context, group, worker string, _ time.Duration, count int) ([]broker.Delivery, error) {
	m, err := t.member(ctx, group, worker)
	if err == nil {
		err = m.catchUp(ctx)
	}
	if err != nil {
		return nil, err
	}
	if t.opt.Share { // no assignment: the broker hands records to any member
		return m.poll(ctx, count, t.opt.Session+rebalanceMargin)
	}
	settled, err := t.awaitGroup(ctx, m)
	if err != nil || settled && !m.ownsAny() {
		return nil, err // a live member keeps its partitions: nothing to take over
	}
	return m.poll(ctx, count, claimWait)
}

// Verbs: a share group reads with ShareFetch and acknowledges with
// ShareAcknowledge (KIP-932), not Fetch and OffsetCommit (broker.Verber).
func (t *Topic) Verbs() broker.Verbs {
	v := Kind.Verbs
	if t.opt.Share {
		v.Read, v.Ack, v.Claim = "ShareFetch", "ShareAcknowledge", "ShareFetch (after the acquisition lock)"
	}
	return v
}

// LiveWorkerKeeps: in a classic group a live member keeps its partitions,
// and what it was handed past the committed offset, until a rebalance
// (broker.LiveKeeper); a share group's acquisition lock runs out instead,
// and the broker hands the record to any member.
func (t *Topic) LiveWorkerKeeps() bool { return !t.opt.Share }

// AutoClaim: Kafka has no scan for idle records to take over.
func (t *Topic) AutoClaim(context.Context, string, string, time.Duration, int) ([]broker.Delivery, error) {
	return nil, broker.Unsupported(broker.Kafka, broker.ClaimByIdle)
}

// Ack commits, per partition, past the acked records, but never past a
// record the worker still holds: a commit is a position, and one past a
// held record would acknowledge it too. An id no member holds (acked
// already, or its worker crashed) acknowledges nothing: it comes back in a
// *broker.NotAcked, the others acked; so does, in a share group, one whose
// accept did not take (its lock ran out: the broker took it back), with
// what the client heard.
func (t *Topic) Ack(ctx context.Context, group string, ids ...string) error {
	byMember, unheld := t.holders(group, ids)
	var refused []*broker.NotAcked
	for m, offs := range byMember {
		if !t.opt.Share {
			if err := m.commit(ctx, offs); err != nil {
				return err
			}
			continue
		}
		na, err := m.settle(ctx, offs, kgo.AckAccept)
		if err != nil {
			return err
		}
		if na != nil {
			refused = append(refused, na)
		}
	}
	return notAcked(unheld, refused)
}

// notAcked is Ack's error: the ids no member held, and those the broker
// refused, with what it said.
func notAcked(unheld []string, refused []*broker.NotAcked) error {
	if len(unheld) == 0 && len(refused) == 0 {
		return nil
	}
	if len(unheld) == 0 && len(refused) == 1 {
		return refused[0]
	}
	out := &broker.NotAcked{IDs: unheld}
	if len(refused) == 0 {
		return out
	}
	var whys []string
	if len(unheld) > 0 {
		whys = append(whys, fmt.Sprintf("no member holds %v", unheld))
	}
	for _, na := range refused {
		out.IDs = append(out.IDs, na.IDs...)
		whys = append(whys, fmt.Sprintf("%v: %s", na.IDs, na.Why))
	}
	out.Why = strings.Join(whys, "; ")
	return out
}

// holders groups ids by the member of group holding each, as partition →
// offsets, and lists the ids no member holds.
func (t *Topic) holders(group string, ids []string) (map[*member]map[int32][]int64, []string) {
	out := map[*member]map[int32][]int64{}
	t.mu.Lock()
	ms := make([]*member, 0, len(t.members))
	for k, m := range t.members {
		if k.group == group {
			ms = append(ms, m)
		}
	}
	t.mu.Unlock()
	var unheld []string
	for _, id := range ids {
		p, off, err := parseEntryID(id)
		if err != nil {
			unheld = append(unheld, id)
			continue
		}
		i := slices.IndexFunc(ms, func(m *member) bool { return m.holds(p, off) })
		if i < 0 {
			unheld = append(unheld, id)
			continue
		}
		if out[ms[i]] == nil {
			out[ms[i]] = map[int32][]int64{}
		}
		out[ms[i]][p] = append(out[ms[i]][p], off)
	}
	return out, unheld
}

func (m *member) holds(p int32, off int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.held[p][off]
	return ok
}

// commit releases offs from what the member holds and commits each
// partition up to its oldest record still held (or past the newest acked).
func (m *member) commit(ctx context.Context, offs map[int32][]int64) error {
	to := map[int32]kgo.EpochOffset{}
	m.mu.Lock()
	for p, os := range offs {
		for _, o := range os {
			delete(m.held[p], o)
		}
		m.acked[p] = max(m.acked[p], slices.Max(os)+1)
		target := m.acked[p]
		for o := range m.held[p] {
			target = min(target, o)
		}
		if target > m.committed[p] {
			to[p] = kgo.EpochOffset{Epoch: -1, Offset: target}
		}
	}
	m.mu.Unlock()
	if len(to) == 0 {
		return nil
	}
	var cerr error
	m.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{m.t.name: to},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			cerr = commitErr(resp, err)
		})
	if cerr != nil {
		return fmt.Errorf("kafka commit %s as %s/%s: %w", m.t.name, m.key.group, m.key.worker, cerr)
	}
	m.mu.Lock()
	for p, eo := range to {
		m.committed[p] = max(m.committed[p], eo.Offset)
	}
	m.mu.Unlock()
	return nil
}

// commitErr is the request's error or the first partition's.
func commitErr(resp *kmsg.OffsetCommitResponse, err error) error {
	if err != nil || resp == nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
				return fmt.Errorf("partition %d: %w", p.Partition, e)
			}
		}
	}
	return nil
}

// Nack seeks the holding worker back to the oldest nacked record of each
// partition: it and every record after it are fetched again, as a consumer
// does after a failure (and Spring Kafka's DefaultErrorHandler).
func (t *Topic) Nack(ctx context.Context, group string, ids ...string) error {
	byMember, _ := t.holders(group, ids) // an id no member holds has nothing to give back
	var errs []error                     // every member's are given back, whatever one's says
	for m, offs := range byMember {
		if !t.opt.Share {
			m.seekBack(offs)
			continue
		}
		// Released: redelivered to any member, counted. One that does not
		// take (its lock ran out: the broker took it back already) is
		// reported, not taken for a redelivery now.
		na, err := m.settle(ctx, offs, kgo.AckRelease)
		if err == nil && na != nil {
			err = fmt.Errorf("kafka nack: %s", na.Error())
		}
		if err == nil {
			t.expectRedelivery(group)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// expectRedelivery tells the group's members that a record the broker took
// back is on its way to one of them: the next poll of each waits for it as
// long as after a seek back (settle), not only the read's block (50 ms by
// default: on a loaded machine the ShareFetch that brings it back took
// longer, and a consume after a release read nothing). A record the release
// archived (at the delivery limit) never comes: that poll waits it out.
func (t *Topic) expectRedelivery(group string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, m := range t.members {
		if k.group == group {
			m.expect.Store(true)
		}
	}
}

func (m *member) seekBack(offs map[int32][]int64) {
	to := map[int32]kgo.EpochOffset{}
	m.mu.Lock()
	for p, os := range offs {
		low := slices.Min(os)
		for o := range m.held[p] {
			if o >= low {
				delete(m.held[p], o)
			}
		}
		to[p] = kgo.EpochOffset{Epoch: -1, Offset: low}
	}
	m.mu.Unlock()
	m.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{m.t.name: to})
	m.expect.Store(true)
}

// Crash closes the worker's client as its process dying would: a static
// member does not leave the group, so its partitions stay with it until
// the session times out (or a worker of the same name comes back), and
// everything after the committed offset is fetched again by their next
// owner.
func (t *Topic) Crash(ctx context.Context, group, worker string) error {
	t.mu.Lock()
	m := t.members[memberKey{group, worker}]
	delete(t.members, memberKey{group, worker})
	if m != nil {
		t.crashed = append(t.crashed, m.key)
	}
	t.mu.Unlock()
	if m != nil {
		m.close(ctx, false)
	}
	return nil
}

// close closes the client; leave also removes the static member from the
// group at once (as an operator's admin command would), so the group can
// be deleted.
func (m *member) close(ctx context.Context, leave bool) {
	m.cl.Close()
	if leave {
		_, _ = m.t.adm.LeaveGroup(ctx, kadm.LeaveGroup(m.t.groupID(m.key.group)).InstanceIDs(m.key.worker))
	}
}
