package world

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/system"
)

// On every broker a team's service is told exactly the placeholders the
// docs promise there (system.PlaceholderList), naming the objects the
// runner's own checks read: the stream key, the sanitized topic and its
// group, the subject, the exchange and the consumer's queue.
func TestBrokerNamesAreThePromisedOnes(t *testing.T) {
	ctx := context.Background()
	p := testConfig(t)
	for _, b := range broker.Names() {
		p.URLs[b] = testservers.URL(t, b)
	}
	sh := Shape{Brokers: broker.Names()}
	w, err := Open(ctx, &p, sh)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	generic := []string{"broker.address", "broker.url", "consumer", "consumer_db.url", "producer_db.url", "replica", "runner"} // replica: each service start's own (sysrun)
	for _, b := range broker.Names() {
		pair, err := w.TakePair(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		names, err := brokerNames(ctx, pair.Env.Broker, "accounting")
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := slices.DeleteFunc(system.PlaceholdersOn(broker.Kinds(), b), func(n string) bool { return slices.Contains(generic, n) })
		if got := slices.Sorted(maps.Keys(names)); !slices.Equal(got, want) {
			t.Errorf("%s: told %v, the docs promise %v", b, got, want)
		}
		topic := kafka.Sanitize(pair.Stream)
		expect := map[string]map[string]string{
			broker.Redis:    {"stream": pair.Stream, "destination": pair.Stream, "group": "accounting"},
			broker.Kafka:    {"topic": topic, "destination": topic, "group": topic + ".accounting"},
			broker.NATS:     {"stream_name": topic, "subject": topic + ".events", "destination": topic + ".events", "group": "accounting"},
			broker.RabbitMQ: {"exchange": pair.Stream, "destination": pair.Stream, "queue": pair.Stream + ".accounting"},
		}[b]
		for k, v := range expect {
			if names[k] != v {
				t.Errorf("%s: ${%s} = %q, want %q", b, k, names[k], v)
			}
		}
		if b == broker.NATS && strings.ContainsAny(names["stream_name"], ":.") {
			t.Errorf("nats stream name %q", names["stream_name"])
		}
		if err := w.ReturnPair(ctx, pair); err != nil {
			t.Fatal(err)
		}
	}
}
