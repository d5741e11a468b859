package runner

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
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
)

func init() { brokerKinds[broker.Kafka] = openKafka }

// KfakeLabel names the runner's own Kafka-protocol server in every report:
// it is franz-go's kfake, not Apache Kafka, and what it shows is what kfake
// does.
const KfakeLabel = "kafka (kfake)"

// kafkaConn is the run's admin client, and its server when the runner's own.
type kafkaConn struct {
	seeds   []string
	cl      *kgo.Client
	adm     *kadm.Client
	srv     *servers.Kafka
	session time.Duration
	label   string
}

// Sessions of the scenario's groups: the shortest the server accepts, so
// a dead worker's partitions move on quickly.
const (
	kfakeSession = time.Second
	kafkaSession = kafka.DefaultSession // group.min.session.timeout.ms of a real broker
)

func openKafka(ctx context.Context, w *World, url string, p *Params) (brokerConn, error) {
	c := kafkaConn{session: kafkaSession, label: broker.Kafka}
	if url == "" {
		srv, err := servers.StartKafka(ctx)
		if err != nil {
			return nil, err
		}
		w.undo.add(srv.Discard)
		c.srv, url, c.session, c.label = srv, srv.URL(), kfakeSession, KfakeLabel
		p.logf("started kfake (franz-go's Kafka-protocol server, not Apache Kafka) pid %d at %s in %s", srv.PID(), srv.Addr(), srv.Dir)
	}
	w.setBrokerURL(broker.Kafka, url)
	w.setBrokerLabel(broker.Kafka, c.label)
	seeds, err := kafka.Seeds(url)
	if err != nil {
		return nil, err
	}
	c.seeds = seeds
	c.cl, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	w.undo.add(func(context.Context) error { c.cl.Close(); return nil })
	c.adm = kadm.NewClient(c.cl)
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(seeds, ","), err)
	}
	if meta.ClusterID != nil && strings.HasPrefix(*meta.ClusterID, servers.KfakeClusterPrefix) {
		// Given by URL, but a kfake a runner started (another run's, or the
		// tests'): its reports say so all the same.
		c.label, c.session = KfakeLabel, kfakeSession
		w.setBrokerLabel(broker.Kafka, c.label)
	}
	return c, nil
}

func (c kafkaConn) New(ctx context.Context, key string, sc *scenario.Scenario) (broker.Broker, error) {
	opt := kafka.Options{Session: c.session, Label: c.label}
	if sc != nil {
		opt.Partitions, opt.Share = sc.Kafka.Partitions, sc.Kafka.Share
	}
	return kafka.New(ctx, c.seeds, key, opt)
}

func (c kafkaConn) Server() (proc, string) {
	if c.srv == nil {
		return nil, notOurs("Kafka", "--kafka")
	}
	return c.srv, ""
}

// Ready waits until the server answers again.
func (c kafkaConn) Ready(ctx context.Context) error {
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
func (c kafkaConn) Hints(key string) []string {
	t := kafka.Sanitize(key)
	b := strings.Join(c.seeds, ",")
	return []string{
		"records:     kcat -b " + b + " -C -t " + t + " -e -f '%p/%o %k %s\\n'",
		"groups:      kafka-consumer-groups.sh --bootstrap-server " + b + " --describe --all-groups | grep " + t,
	}
}

// leftoverTopic and leftoverGroup are a scenario's topics and groups: the
// runner's key drill:ID:N sanitized (broker/kafka), and nothing else.
var (
	leftoverTopic = regexp.MustCompile(`^` + namePrefix + `_[0-9a-f]{8}_[0-9]+(\.dlq|\.out)?$`)
	leftoverGroup = regexp.MustCompile(`^` + namePrefix + `_[0-9a-f]{8}_[0-9]+\..+$`)
)

// Lease is a consumer group named drill.lease.ID with one member, this
// run's: while the run lives the group has a member; when the run dies its
// session runs out and the group is empty.
func (c kafkaConn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	topic := leaseName(".", "topic")
	resp, err := c.adm.CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return nil, fmt.Errorf("kafka lease topic: %w", err)
	}
	joined := make(chan struct{})
	var once bool
	member, err := kgo.NewClient(kgo.SeedBrokers(c.seeds...), kgo.ConsumerGroup(leaseName(".", runID)), kgo.ConsumeTopics(topic),
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
	return func(context.Context) error { member.Close(); return nil }, nil
}

// live reports whether run's lease group has a member (unknown: live).
func (c kafkaConn) live(ctx context.Context, run string) bool {
	ds, err := c.adm.DescribeGroups(ctx, leaseName(".", run))
	if err != nil {
		return true
	}
	d, ok := ds[leaseName(".", run)]
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
func (c kafkaConn) Clean(ctx context.Context) (Cleaned, error) {
	var out Cleaned
	topics, err := c.adm.ListTopics(ctx)
	if err != nil {
		return out, err
	}
	groups, err := c.adm.ListGroups(ctx)
	if err != nil {
		return out, err
	}
	var names []string
	for _, t := range topics.Names() {
		if leftoverTopic.MatchString(t) {
			names = append(names, t)
		}
	}
	for _, g := range groups.Groups() {
		if leftoverGroup.MatchString(g) {
			names = append(names, g)
		}
	}
	slices.Sort(names)
	live := map[string]bool{}
	var dropTopics, dropGroups []string
	for _, n := range names {
		run := runOf(n)
		l, seen := live[run]
		if !seen {
			l = c.live(ctx, run)
			live[run] = l
		}
		switch {
		case l:
			out.Live = append(out.Live, n)
		case leftoverTopic.MatchString(n):
			dropTopics = append(dropTopics, n)
		default:
			dropGroups = append(dropGroups, n)
		}
	}
	var errs []error
	if len(dropGroups) > 0 {
		resp, err := c.adm.DeleteGroups(ctx, dropGroups...)
		errs = append(errs, err)
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
	}
	if len(dropTopics) > 0 {
		resp, err := c.adm.DeleteTopics(ctx, dropTopics...)
		errs = append(errs, err)
		for _, r := range resp {
			switch {
			case r.Err == nil:
				out.Dropped = append(out.Dropped, "topic "+r.Topic)
			case !errors.Is(r.Err, kerr.UnknownTopicOrPartition):
				errs = append(errs, fmt.Errorf("delete topic %s: %w", r.Topic, r.Err))
			}
		}
	}
	return out, errors.Join(errs...)
}
