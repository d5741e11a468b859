package kafka

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
	"github.com/outboxdrill/runner/internal/lazy"
)

// conn is a run's admin client, and its server when the runner's own.
type conn struct {
	seeds   []string
	cl      *kgo.Client
	adm     *kadm.Client
	srv     *kafkaserver.Server
	session time.Duration
	label   string
}

// Sessions of the scenario's groups: the shortest the server accepts, so
// a dead worker's partitions move on quickly.
const (
	kfakeSession = time.Second
	kafkaSession = DefaultSession // group.min.session.timeout.ms of a real broker
)

func open(ctx context.Context, h broker.Host, url string, own broker.Process) (broker.Conn, error) {
	c := conn{session: kafkaSession, label: broker.Kafka}
	if c.srv, _ = own.(*kafkaserver.Server); c.srv != nil {
		c.session, c.label = kfakeSession, KfakeLabel
	}
	h.SetLabel(c.label)
	seeds, err := Seeds(url)
	if err != nil {
		return nil, errSeeds
	}
	c.seeds = seeds
	c.cl, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	h.Defer(func(context.Context) error { c.cl.Close(); return nil })
	c.adm = kadm.NewClient(c.cl)
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(seeds, ","), err)
	}
	if meta.ClusterID != nil && isKfake(*meta.ClusterID) {
		// Given by URL, but a kfake (a runner's: another run's, or the
		// tests'; or one a user started): its reports say so all the same.
		c.label, c.session = KfakeLabel, kfakeSession
		h.SetLabel(c.label)
	}
	return c, nil
}

// isKfake tells kfake by its cluster id: a runner's own (kafkaserver.ClusterPrefix)
// or kfake's default, "kfake" (kfake.ClusterID).
func isKfake(clusterID string) bool {
	return strings.HasPrefix(clusterID, kafkaserver.ClusterPrefix) || clusterID == "kfake"
}

func (c conn) New(ctx context.Context, key string, sc broker.Scenario) (broker.Broker, error) {
	opt := Options{Session: c.session, Label: c.label}
	if o, ok := sc.Options.(*ScenarioOptions); ok {
		opt.Partitions, opt.Share = o.Partitions, o.Share
	}
	return New(ctx, c.seeds, key, opt)
}

func (c conn) Server() (broker.Process, string) {
	if c.srv == nil {
		return nil, ""
	}
	return c.srv, ""
}

// Ready waits until the server answers again.
func (c conn) Ready(ctx context.Context) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.cl.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Hints tell how to look at a kept scenario's topic (kcat).
func (c conn) Hints(key string) []string {
	t := Sanitize(key)
	b := strings.Join(c.seeds, ",")
	return []string{
		"records:     kcat -b " + b + " -C -t " + t + " -e -f '%p/%o %k %s\\n'",
		"groups:      kafka-consumer-groups.sh --bootstrap-server " + b + " --describe --all-groups | grep " + t,
	}
}

// leftoverTopic and leftoverGroup are a scenario's topics and groups: the
// runner's key drill:ID:N sanitized (Sanitize), and nothing else.
var (
	leftoverTopic = lazy.Regexp(`^` + broker.NamePrefix + `_` + broker.RunIDForm + `_` + broker.CounterForm + `(\.dlq|\.out)?$`)
	leftoverGroup = lazy.Regexp(`^` + broker.NamePrefix + `_` + broker.RunIDForm + `_` + broker.CounterForm + `\..+$`)
)

// Lease is a consumer group named drill.lease.ID with one member, this
// run's: while the run lives the group has a member; when the run dies its
// session runs out and the group is empty.
func (c conn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	topic := broker.LeaseName(".", "topic")
	resp, err := c.adm.CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("kafka lease topic: %w", err)
	}
	joined := make(chan struct{})
	var once bool
	member, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ConsumerGroup(broker.LeaseName(".", runID)), kgo.ConsumeTopics(topic),
		kgo.SessionTimeout(c.session), kgo.HeartbeatInterval(c.session/4),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			if !once {
				once = true
				close(joined)
			}
		}))
	if err != nil {
		return nil, err
	}
	go func() { // a group member polls; nothing is ever produced to the topic
		for {
			if fs := member.PollFetches(context.Background()); fs.IsClientClosed() {
				return
			}
		}
	}()
	select {
	case <-joined:
	case <-ctx.Done():
		member.Close()
		return nil, context.Cause(ctx)
	case <-time.After(15 * time.Second):
		member.Close()
		return nil, errors.New("kafka lease: the lease group never assigned its member")
	}
	return func(ctx context.Context) error {
		member.Close() // leaves the group
		// An empty group stays on the broker (until its offsets retention,
		// days): the run's own to remove, or every run would leave one.
		var out broker.Cleaned
		return c.dropGroups(ctx, []string{broker.LeaseName(".", runID)}, &out)
	}, nil
}

// leaseGroup is a run's lease group (Lease).
var leaseGroup = lazy.Regexp(`^` + regexp.QuoteMeta(broker.LeaseName(".", "")) + `([0-9a-f]{8})$`)

// live reports whether run's lease group has a member (unknown: live).
func (c conn) live(ctx context.Context, run string) bool {
	ds, err := c.adm.DescribeGroups(ctx, broker.LeaseName(".", run))
	if err != nil {
		return true
	}
	d, ok := ds[broker.LeaseName(".", run)]
	switch {
	case !ok:
		return true
	case errors.Is(d.Err, kerr.GroupIDNotFound):
		return false // never leased, or long gone
	case d.Err != nil:
		return true
	}
	return len(d.Members) > 0 // "Dead" or "Empty": the run's member left or timed out
}

// Clean deletes the topics and groups of runs whose lease group is empty.
func (c conn) Clean(ctx context.Context) (broker.Cleaned, error) {
	var out broker.Cleaned
	names, err := c.leftovers(ctx)
	if err != nil {
		return out, err
	}
	live := broker.LiveRuns(func(run string) bool { return c.live(ctx, run) })
	var dropTopics, dropGroups []string
	for _, n := range names {
		switch m := leaseGroup().FindStringSubmatch(n); {
		case m != nil && c.live(ctx, m[1]):
			out.Live = append(out.Live, n)
		case m != nil: // a dead run's lease group: empty, left when it was killed
			dropGroups = append(dropGroups, n)
		case live(n):
			out.Live = append(out.Live, n)
		case leftoverTopic().MatchString(n):
			dropTopics = append(dropTopics, n)
		default:
			dropGroups = append(dropGroups, n)
		}
	}
	errs := []error{c.dropGroups(ctx, dropGroups, &out), c.dropTopics(ctx, dropTopics, &out)}
	return out, errors.Join(errs...)
}

// leftovers are the topics and groups with the runner's names, sorted.
func (c conn) leftovers(ctx context.Context) ([]string, error) {
	topics, err := c.adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	groups, err := c.adm.ListGroups(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range topics.Names() {
		if leftoverTopic().MatchString(t) {
			names = append(names, t)
		}
	}
	for _, g := range groups.Groups() {
		if leftoverGroup().MatchString(g) || leaseGroup().MatchString(g) {
			names = append(names, g)
		}
	}
	slices.Sort(names)
	return names, nil
}

func (c conn) dropGroups(ctx context.Context, groups []string, out *broker.Cleaned) error {
	if len(groups) == 0 {
		return nil
	}
	resp, err := c.adm.DeleteGroups(ctx, groups...)
	errs := []error{err}
	for _, r := range resp {
		switch {
		case r.Err == nil:
			out.Dropped = append(out.Dropped, "group "+r.Group)
		case errors.Is(r.Err, kerr.NonEmptyGroup):
			out.InUse = append(out.InUse, "group "+r.Group)
		case !errors.Is(r.Err, kerr.GroupIDNotFound):
			errs = append(errs, fmt.Errorf("delete group %s: %w", r.Group, r.Err))
		}
	}
	return errors.Join(errs...)
}

func (c conn) dropTopics(ctx context.Context, topics []string, out *broker.Cleaned) error {
	if len(topics) == 0 {
		return nil
	}
	resp, err := c.adm.DeleteTopics(ctx, topics...)
	errs := []error{err}
	for _, r := range resp {
		switch {
		case r.Err == nil:
			out.Dropped = append(out.Dropped, "topic "+r.Topic)
		case !errors.Is(r.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("delete topic %s: %w", r.Topic, r.Err))
		}
	}
	return errors.Join(errs...)
}
