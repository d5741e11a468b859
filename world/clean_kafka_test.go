package world

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/internal/testservers"
)

// TestCleanKafka: a live run's topic and group survive a clean, a killed
// run's (another run id, no lease member) go, and a bystander topic of
// almost the runner's shape stays.
func TestCleanKafka(t *testing.T) {
	testservers.CleanAlone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testConfig(t)
	p.URLs[broker.Kafka] = testservers.URL(t, broker.Kafka)
	sh := Shape{Brokers: []string{broker.Kafka}}
	seeds, err := kafka.Seeds(p.URLs[broker.Kafka])
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := func() map[string]bool {
		ts, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, n := range ts.Names() {
			out[n] = true
		}
		return out
	}

	w, err := Open(ctx, &p, sh)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pr, err := w.TakePair(ctx, broker.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	defer w.ReturnPair(ctx, pr) // before Close: a pair still out keeps its sessions
	liveTopic := kafka.Sanitize(pr.Stream)
	if _, err := pr.Env.Broker.Read(ctx, "g", "w", 0, 10*time.Millisecond); err != nil { // its group
		t.Fatal(err)
	}

	dead := newRunID()
	deadTopic, err := kafka.New(ctx, seeds, namePrefix+":"+dead+":1", kafka.Options{Session: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deadTopic.Read(ctx, "g", "w", 0, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_ = deadTopic.Crash(ctx, "g", "w") // the killed run's worker: its group outlives it
	bystander := namePrefix + "_" + dead + "_1.other"
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, bystander); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), bystander)

	// The killed run's lease: a group whose member left without removing it.
	deadLease := broker.LeaseName(".", dead)
	lm, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(deadLease), kgo.ConsumeTopics(broker.LeaseName(".", "topic")))
	if err != nil {
		t.Fatal(err)
	}
	if err := lm.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; { // joins; a poll may end before the join does
		lm.PollFetches(pollCtx(ctx, 200*time.Millisecond))
		ds, err := adm.DescribeGroups(ctx, deadLease)
		if err == nil && len(ds[deadLease].Members) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead run's lease member never joined %s: %v", deadLease, err)
		}
	}
	lm.Close() // leaves the group, empty and not removed: as a killed run's

	// The dead worker's session runs out (1 s); under load it may take longer.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ds, err := adm.DescribeGroups(ctx, deadTopic.Name()+".g")
		if err == nil && len(ds[deadTopic.Name()+".g"].Members) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead worker is still in its group after 15 s: %v", err)
		}
	}
	c, err := Clean(ctx, "", map[string]string{broker.Kafka: p.URLs[broker.Kafka]})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dropped %v, live %v, in use %v", c.Dropped, c.Live, c.InUse)
	after := topics()
	for _, n := range []string{deadTopic.Name(), deadTopic.Name() + ".dlq"} {
		if after[n] {
			t.Errorf("the killed run's topic %s is still there", n)
		}
	}
	for _, n := range []string{liveTopic, liveTopic + ".dlq", bystander} {
		if !after[n] {
			t.Errorf("%s was dropped: a live run's or a bystander's", n)
		}
	}
	groups, _ := adm.ListGroups(ctx)
	live := broker.LeaseName(".", w.RunID)
	seen := map[string]bool{}
	for _, g := range groups.Groups() {
		seen[g] = true
		if g == deadTopic.Name()+".g" || g == deadLease {
			t.Errorf("the killed run's group %s is still there", g)
		}
	}
	if !seen[live] {
		t.Errorf("the live run's lease group %s was dropped", live)
	}
	// A run that ends removes its own lease group.
	if err := w.ReturnPair(ctx, pr); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	groups, _ = adm.ListGroups(ctx)
	for _, g := range groups.Groups() {
		if g == live {
			t.Errorf("the ended run left its lease group %s", g)
		}
	}
}

// pollCtx bounds one poll.
func pollCtx(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	context.AfterFunc(c, cancel)
	return c
}
