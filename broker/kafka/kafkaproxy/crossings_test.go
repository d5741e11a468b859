package kafkaproxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/brokertest"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/broker/kafka/kafkaproxy"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/proxy/fault"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// drill is a relay and a consumer group through the proxy: three
// Produces, then the records fetched and each committed on its own.
func drill(t *testing.T, arm *fault.Trigger) ([]fault.Crossing, broker.Strike) {
	t.Helper()
	return brokertest.Through(t, kafkaproxy.Kind{}, testservers.Broker(t, kafka.Kind), arm, func(p broker.Proxy) {
		seeds, err := kafka.Seeds(p.URL())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		topic := fmt.Sprintf("xing-%d", time.Now().UnixNano())
		admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
		prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		for i := range 3 {
			if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		var recs []*kgo.Record
		for len(recs) < 3 && ctx.Err() == nil {
			recs = append(recs, cons.PollFetches(ctx).Records()...)
		}
		for _, r := range recs {
			if err := cons.CommitRecords(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Each point explore would take from the crossings strikes the crossing it
// names: the nth of those its trigger counts, in a run of its own (the
// count of idle Fetches varies from run to run; the struck one is found by
// its count, not its place).
func TestCrossingsCountAsTheTriggersDo(t *testing.T) {
	xs, _ := drill(t, nil)
	var got []string
	for _, c := range xs {
		if c.Op != "deliver" {
			got = append(got, fmt.Sprintf("%s→%s/%d/%d", c.Op, c.Reply, c.Request, c.Response))
		}
	}
	if want := fmt.Sprint([]string{"publish→ok/0/0", "publish→ok/0/0", "publish→ok/0/0", "ack→ok/0/0", "ack→ok/0/0", "ack→ok/0/0"}); fmt.Sprint(got) != want {
		t.Fatalf("crossings\n%v\nwant\n%v", got, want)
	}
	// Past the first Fetch, their count varies from run to run.
	brokertest.EveryCrossingStrikes(t, xs, drill, func(c fault.Crossing, nth int) bool { return c.Op == "deliver" && nth > 1 })
}
