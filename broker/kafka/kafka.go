// Package kafka implements broker.Broker on Apache Kafka's protocol with
// franz-go: one topic per scenario (the business event id is the record
// key), a classic consumer group per consumer id, and a topic for dead
// letters.
//
// Kafka is not Redis Streams, and the differences show in drills:
//
//   - A group commits one offset per partition, not an acknowledgement per
//     record (https://kafka.apache.org/documentation/#design_consumerposition).
//     Ack commits up to the oldest record the worker still holds; a record
//     not committed comes back with every record after it.
//   - A partition belongs to one member of the group. Another worker gets a
//     dead worker's records only when the group gives it the partition: at
//     once when the member leaves, after the session timeout when it just
//     dies. Workers are static members (group.instance.id = the worker), so
//     a crash does not leave the group and a restarted worker of the same
//     name takes its partitions straight back.
//   - Nack is what a consumer does after a failed record: it seeks back to
//     it, so it and everything after it are fetched again. A classic group
//     counts no deliveries, so a poison record comes back forever and blocks
//     its partition: Deliveries is 0 (unknown) and DeliveryCount is not
//     declared.
//   - With Options.Share the groups are share groups (KIP-932): records are
//     acknowledged one by one (accept, release, reject) and the broker
//     counts deliveries.
//
// What a Topic keeps is client state a real consumer keeps too: a client
// per worker and the records it was handed and has not yet committed (to
// know what a commit may cover). It dies with the worker (Crash).
package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker"
)

// Header names of a dead-letter record.
const (
	HeaderReason     = "reason"
	HeaderEntryID    = "entry-id"
	HeaderDeliveries = "deliveries"
)

// Defaults of Options.
const (
	DefaultSession = 6 * time.Second // Kafka's group.min.session.timeout.ms
)

// Options configure a Topic.
type Options struct {
	// Partitions of the topic (default 1): records of one event id stay in
	// one partition, in order.
	Partitions int
	// Session is the consumer-group session timeout: how long a dead
	// worker keeps its partitions (default 6s, the smallest a Kafka broker
	// accepts by default; the runner's own server accepts 100ms).
	Session time.Duration
	// TxnTimeout is how long the broker lets a worker's transaction stay
	// open before it aborts it (transaction.timeout.ms): what the group's
	// other workers wait out after a worker died inside one (default twice
	// the session: 2s on the runner's own server, where drills wait it out).
	TxnTimeout time.Duration
	// Share consumes with share groups (KIP-932) instead of classic groups.
	Share bool
	// Label names the server in errors: "kafka (kfake)" for the runner's own.
	Label string
}

func (o Options) withDefaults() Options {
	if o.Partitions <= 0 {
		o.Partitions = 1
	}
	if o.Session <= 0 {
		o.Session = DefaultSession
	}
	if o.TxnTimeout <= 0 {
		o.TxnTimeout = 2 * o.Session
	}
	if o.Label == "" {
		o.Label = broker.Kafka
	}
	return o
}

// Topic is a broker.Broker on one Kafka topic. The seed brokers and the
// admin client are the run's; a Topic owns its two topics, its groups and
// the clients of its workers.
type Topic struct {
	seeds []string
	adm   *kadm.Client
	prod  *kgo.Client // produces records and dead letters; idempotent, acks=all
	// refused ends a publish whose every seed broker refused to connect
	refused *refusals
	name    string
	opt     Options

	mu      sync.Mutex
	members map[memberKey]*member
	txns    map[memberKey]*txnMember // workers reading in broker transactions
	crashed []memberKey              // static members that died without leaving
	groups  []string                 // group names created, for Delete
	adopted []string                 // group ids a team's services joined, for Delete (Adopt)
}

var _ broker.Broker = (*Topic)(nil)

// New creates the topic for name and its dead-letter topic. name is
// sanitized into a topic name: every character outside [A-Za-z0-9._-]
// becomes '_'.
func New(ctx context.Context, seeds []string, name string, opt Options) (*Topic, error) {
	tn := Sanitize(name)
	if strings.Trim(tn, "_") == "" {
		return nil, fmt.Errorf("kafka: topic name %q has no usable character", name)
	}
	opt = opt.withDefaults()
	refused := newRefusals(seeds)
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.RecordDeliveryTimeout(5*time.Second), // a relay facing a dead broker fails within 5 s
		// ... also with a record already sent when the broker died: by
		// default franz-go's idempotent producer waits for the outcome of an
		// in-flight record, forever when the broker stays down (the relay
		// step hung past the scenario's timeout and Ctrl-C). A relay that
		// gives up leaves the row unpublished; its next pass may publish it
		// again, which the inbox dedupes: the outbox's own promise.
		kgo.AllowIdempotentProduceCancellation(),
		kgo.WithHooks(refused), // at once when nothing listens
		// After a failed metadata load ask again within 250 ms, as the
		// Java producer does (retry.backoff.ms, 100 ms), not after
		// franz-go's 5 s: a relay's first publish after a broker restart
		// would otherwise wait out the rest of those 5 s.
		kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	t := &Topic{seeds: seeds, adm: kadm.NewClient(prod), prod: prod, refused: refused, name: tn, opt: opt, members: map[memberKey]*member{}, txns: map[memberKey]*txnMember{}}
	for _, n := range []string{t.name, t.dlqName()} {
		if err := t.createTopic(ctx, n); err != nil {
			_ = t.Delete(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	return t, nil
}

// createTopic creates topic n, keeping everything until deleted: no
// time or size retention.
func (t *Topic) createTopic(ctx context.Context, n string) error {
	never := "-1"
	resp, err := t.adm.CreateTopic(ctx, int32(t.opt.Partitions), -1,
		map[string]*string{"retention.ms": &never, "retention.bytes": &never}, n)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafka create topic %s: %w", n, err)
	}
	return nil
}

// Sanitize maps name onto the characters Kafka allows in a topic name.
func Sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			return r
		}
		return '_'
	}, name)
}

func (t *Topic) dlqName() string { return t.name + ".dlq" }

// groupID is the Kafka group of consumer group g: prefixed with the topic,
// so that groups of different scenarios never meet and clean finds them.
func (t *Topic) groupID(g string) string { return t.name + "." + g }

// Name is the topic; dead letters are in Name()+".dlq", groups are Name()+".GROUP".
func (t *Topic) Name() string { return t.name }

// Capabilities: an entry log with retention and history. No pending list or
// count (a group has offsets, not acknowledgements), no claim by idle time,
// no dedupe by event id, no dead-letter queue of the broker's own; share
// groups add a delivery count.
func (t *Topic) Capabilities() broker.Capabilities { return capsOf(t.opt.Share) }

// capabilities are those of the topic a scenario's options make
// (Kind.Capabilities): its groups are share groups or classic ones.
func capabilities(sc broker.Scenario) broker.Capabilities {
	o, ok := sc.Options.(*ScenarioOptions)
	return capsOf(ok && o.Share)
}

func capsOf(share bool) broker.Capabilities {
	cs := broker.Capabilities{broker.EntryLog: true, broker.Retention: true, broker.Purge: true, broker.ReplayHistory: true, broker.BrokerTxn: true}
	if share {
		cs[broker.DeliveryCount] = true
	} else {
		cs[broker.GroupLag] = true // a share group has no committed offset (KIP-932)
	}
	return cs
}

// Publish produces msgs, each keyed by its event id, and returns once the
// broker acknowledged them (acks=all). An entry id is PARTITION/OFFSET.
func (t *Topic) Publish(ctx context.Context, msgs []broker.Message) ([]string, error) {
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = &kgo.Record{Topic: t.name, Key: []byte(m.EventID), Value: []byte(m.Payload)}
	}
	pctx, done := t.refused.watch(ctx)
	defer done()
	res := t.prod.ProduceSync(pctx, recs...)
	ids := make([]string, 0, len(msgs))
	for i, r := range res {
		if r.Err != nil {
			err := r.Err
			if cause := context.Cause(pctx); ctx.Err() == nil && cause != nil {
				err = cause // refused everywhere: say so, not "context canceled"
			}
			return ids, fmt.Errorf("kafka produce %s (event %s): %w", t.name, msgs[i].EventID, err)
		}
		ids = append(ids, entryID(r.Record.Partition, r.Record.Offset))
	}
	return ids, nil
}

func entryID(p int32, off int64) string { return fmt.Sprintf("%d/%d", p, off) }

// EntryID is a record's entry id as the runner names it: PARTITION/OFFSET.
func EntryID(p int32, off int64) string { return entryID(p, off) }

// parseEntryID reads PARTITION/OFFSET.
func parseEntryID(id string) (int32, int64, error) {
	var p int32
	var off int64
	if n, err := fmt.Sscanf(id, "%d/%d", &p, &off); n != 2 || err != nil {
		return 0, 0, fmt.Errorf("kafka: %q is not an entry id (PARTITION/OFFSET)", id)
	}
	return p, off, nil
}

// Entries counts the records a read_committed consumer can get now
// (committedLog): not the end offset minus the start one, which also counts
// transaction markers, aborted records and those of a transaction still
// open. With no transactional producer on the topic the two agree.
func (t *Topic) Entries(ctx context.Context) (int64, error) {
	recs, err := t.committedLog(ctx, t.name)
	if err != nil {
		return 0, err
	}
	return int64(len(recs)), nil
}

// bounds are the start and end offsets of each partition of topic n.
func (t *Topic) bounds(ctx context.Context, n string) (start, end map[int32]int64, err error) {
	s, err := t.adm.ListStartOffsets(ctx, n)
	if err == nil {
		err = s.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kafka list offsets %s: %w", n, err)
	}
	e, err := t.adm.ListEndOffsets(ctx, n)
	if err == nil {
		err = e.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kafka list offsets %s: %w", n, err)
	}
	start, end = map[int32]int64{}, map[int32]int64{}
	s.Each(func(o kadm.ListedOffset) { start[o.Partition] = o.Offset })
	e.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return start, end, nil
}

// Events lists the event id (record key) of every entry (as Entries
// counts them: what a read_committed consumer gets), partition by
// partition, each in offset order.
func (t *Topic) Events(ctx context.Context) ([]string, error) {
	recs, err := t.committedLog(ctx, t.name)
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = string(r.Key)
	}
	return ids, err
}

// read reads every record topic n holds, up to the end offsets when
// called, with a client outside any group, at isolation level iso.
func (t *Topic) read(ctx context.Context, n string, iso kgo.IsolationLevel) ([]*kgo.Record, error) {
	start, end, err := t.bounds(ctx, n)
	if err != nil {
		return nil, err
	}
	from := map[int32]kgo.Offset{}
	for p, e := range end {
		if e > start[p] {
			from[p] = kgo.NewOffset().At(start[p])
		}
	}
	if len(from) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.seeds...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{n: from}),
		kgo.FetchMaxWait(50*time.Millisecond), kgo.FetchIsolationLevel(iso))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	next := maps(start)
	for !caughtUp(next, end) {
		// Transaction markers and aborted records hold offsets no record
		// is returned for: a poll that brings nothing means read to the end.
		wait := 300 * time.Millisecond
		if len(out) == 0 {
			wait = time.Second // the client's first fetch also looks up metadata
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return out, context.Cause(ctx)
		}
		if fs.NumRecords() == 0 {
			break
		}
		var errs []error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, err)
			}
		})
		if len(errs) > 0 {
			return out, fmt.Errorf("kafka read %s: %w", n, errors.Join(errs...))
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end[r.Partition] {
				out = append(out, r)
				next[r.Partition] = r.Offset + 1
			}
		})
	}
	slices.SortStableFunc(out, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return out, nil
}

func maps(m map[int32]int64) map[int32]int64 {
	out := make(map[int32]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// caughtUp: every partition was read up to its end.
func caughtUp(next, end map[int32]int64) bool {
	for p, e := range end {
		if next[p] < e {
			return false
		}
	}
	return true
}

// Trim deletes records (DeleteRecords) so that only the newest keep remain,
// over all partitions by timestamp.
func (t *Topic) Trim(ctx context.Context, keep int) (int64, error) {
	recs, err := t.read(ctx, t.name, kgo.ReadUncommitted())
	if err != nil {
		return 0, err
	}
	drop := len(recs) - max(keep, 0)
	if drop <= 0 {
		return 0, nil
	}
	byAge := slices.Clone(recs)
	slices.SortStableFunc(byAge, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	if err := t.deleteThrough(ctx, byAge[:drop]); err != nil {
		return 0, err
	}
	return int64(drop), nil
}

// deleteThrough deletes (DeleteRecords) every record up to and including
// the last of recs in each partition.
func (t *Topic) deleteThrough(ctx context.Context, recs []*kgo.Record) error {
	cut := kadm.Offsets{}
	for _, r := range recs {
		if o, ok := cut.Lookup(r.Topic, r.Partition); !ok || o.At <= r.Offset {
			cut.Add(kadm.Offset{Topic: r.Topic, Partition: r.Partition, At: r.Offset + 1, LeaderEpoch: -1})
		}
	}
	resp, err := t.adm.DeleteRecords(ctx, cut)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka delete records: %w", err)
	}
	return nil
}

// Delete closes the workers' clients, then deletes the groups and both
// topics. What is already gone is not an error.
func (t *Topic) Delete(ctx context.Context) error {
	t.mu.Lock()
	ms := make([]*member, 0, len(t.members))
	for _, m := range t.members {
		ms = append(ms, m)
	}
	t.members = map[memberKey]*member{}
	txns := t.txns
	t.txns = map[memberKey]*txnMember{}
	groups := slices.Clone(t.groups)
	adopted := slices.Clone(t.adopted)
	t.mu.Unlock()
	for _, m := range ms {
		m.close(ctx, true)
	}
	t.removeCrashed(ctx)
	for _, m := range txns {
		m.sess.Close() // not static: it leaves the group
	}
	var errs []error
	if len(groups) > 0 {
		ids := make([]string, len(groups))
		for i, g := range groups {
			ids[i] = t.groupID(g)
		}
		if err := t.deleteGroups(ctx, t.opt.Session+2*time.Second, ids...); err != nil {
			errs = append(errs, err)
		}
	}
	if len(adopted) > 0 {
		if err := t.deleteAdopted(ctx, adopted); err != nil {
			errs = append(errs, err)
		}
	}
	resp, err := t.adm.DeleteTopics(ctx, t.name, t.dlqName(), t.outName())
	if err == nil {
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				errs = append(errs, fmt.Errorf("kafka delete topic %s: %w", r.Topic, r.Err))
			}
		}
	} else {
		errs = append(errs, fmt.Errorf("kafka delete topics %s: %w", t.name, err))
	}
	t.prod.Close()
	return errors.Join(errs...)
}

// deleteGroups deletes consumer groups, waiting up to wait for a group
// that still has members: one that died without leaving keeps the group
// until its session runs out (the broker refuses to delete a group with
// members), and one removed (evict) until the rebalance it started ends.
func (t *Topic) deleteGroups(ctx context.Context, wait time.Duration, ids ...string) error {
	deadline := time.Now().Add(wait)
	var errs []error
	for {
		resp, err := t.adm.DeleteGroups(ctx, ids...)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("kafka delete groups: %w", err))...)
		}
		var left []string
		for _, r := range resp {
			switch {
			case r.Err == nil, errors.Is(r.Err, kerr.GroupIDNotFound):
			case errors.Is(r.Err, kerr.NonEmptyGroup) && time.Now().Before(deadline):
				left = append(left, r.Group)
			default:
				errs = append(errs, fmt.Errorf("kafka delete group %s: %w", r.Group, r.Err))
			}
		}
		if len(left) == 0 || ctx.Err() != nil {
			return errors.Join(errs...)
		}
		ids = left
		time.Sleep(50 * time.Millisecond)
	}
}

// Pending: a classic group keeps one committed offset per partition, not a
// list of delivered, unacknowledged records.
func (t *Topic) Pending(context.Context) (map[string]int64, error) {
	return nil, broker.Unsupported(broker.Kafka, broker.PendingCount)
}

// PendingStats: see Pending.
func (t *Topic) PendingStats(context.Context) (broker.PendingStats, error) {
	return broker.PendingStats{}, broker.Unsupported(broker.Kafka, broker.PendingCount)
}

// Seeds reads a server address as --kafka and RUNNER_KAFKA_URL give it:
// host:port, several separated by commas, optionally as kafka://host:port.
func Seeds(url string) ([]string, error) {
	rest := strings.TrimPrefix(url, "kafka://")
	var out []string
	for _, s := range strings.Split(rest, ",") {
		s = strings.TrimSpace(s)
		if s == "" || strings.ContainsAny(s, "/@?") || !strings.Contains(s, ":") {
			return nil, fmt.Errorf("kafka: %q is not host:port[,host:port...] (or kafka://host:port)", s)
		}
		out = append(out, s)
	}
	return out, nil
}
