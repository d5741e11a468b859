package kafka

import (
	"context"
	"errors"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka/kafkaserver"
)

// KfakeLabel names the runner's own Kafka-protocol server in every report:
// it is franz-go's kfake, not Apache Kafka, and what it shows is what kfake
// does.
const KfakeLabel = "kafka (kfake)"

// Kind is Kafka as the runner knows it (broker/kinds registers it). Its
// own server is kfake, labelled KfakeLabel in every report.
var Kind = &broker.Kind{
	Name: broker.Kafka, Title: "Kafka", Product: "Kafka",
	Flag: "kafka", Env: "RUNNER_KAFKA_URL",
	FlagUsage: "the Kafka cluster at `HOST:PORT`[,HOST:PORT...]", Own: "kfake", Want: "HOST:PORT[,HOST:PORT...]",
	Ports:        map[string]string{"kafka": "9092"},
	Placeholders: []string{"topic", "group"},
	Probe: broker.Probe{
		// ApiVersions v0, correlation id 1, no client id: the answer's
		// header (after the 4-byte size) carries the correlation id back.
		Protocol: "Kafka", Hello: []byte{0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff}, Need: 8,
		OK:    func(a []byte) bool { return a[4] == 0 && a[5] == 0 && a[6] == 0 && a[7] == 1 },
		Addrs: probeAddrs,
	},
	Capabilities: capabilities,

	Start:  start,
	Open:   open,
	Dir:    kafkaserver.Dir,
	Limits: limits,
	Verbs:  broker.Verbs{Publish: "Produce", Read: "Fetch", Ack: "OffsetCommit", Claim: "Fetch (after the rebalance)"},
	Mechanisms: map[broker.Mechanism]string{
		broker.SecondPublish: "a second record: the idempotent producer drops a retried batch only within one producer session, never a relay's second publish",
		broker.Takeover:      "none per record: the group rebalances the dead member's partitions (at once if it left, after session.timeout.ms if it just died; a static member coming back takes them straight back) and the new owner fetches everything after the committed offset",
		broker.RolledBack:    "no negative ack in a classic group: the consumer seeks back to the failed record, which comes again WITH every record after it; uncounted, so a poison record blocks its partition",
		broker.Inspection:    "nothing per record: a committed offset per partition (consumer lag = end offset − committed), so `stream.pending` is n/a",
		broker.DeadLetters:   "application-level only: a second topic (brokers have none; Kafka Connect's is for connectors)",
		broker.Durability:    "acks=all; the runner's own server is kfake with one broker writing to its data dir without fsync (Kafka's default: durability comes from replication, which kfake does not implement); a SIGKILL keeps the page cache",
	},
	LabelNote:  kfakeNote,
	Options:    ScenarioOptions{},
	OptionsDoc: "this scenario's Kafka topic",
}

// ScenarioOptions tune a scenario's Kafka topic and groups (its kafka: key).
type ScenarioOptions struct {
	Partitions int  `param:"partitions" default:"1" min:"1" doc:"partitions of the topic: records of one event id stay in one partition, and order holds only within a partition"`
	Share      bool `param:"share" default:"false" doc:"consume with share groups (KIP-932): per-record acknowledgement and a delivery count; without it, classic consumer groups with committed offsets"`
}

// errSeeds says what a Kafka address must be without quoting it: the
// address may carry user info.
var errSeeds = errors.New("want host:port, a comma-separated list of them, or kafka://host:port")

// probeAddrs are the seed brokers of url; the ApiVersions hello is plain.
func probeAddrs(url string) ([]broker.Addr, bool, error) {
	seeds, err := Seeds(url)
	if err != nil {
		return nil, false, errSeeds
	}
	var addrs []broker.Addr
	for _, s := range seeds {
		addrs = append(addrs, broker.Addr{Network: "tcp", Addr: s})
	}
	return addrs, true, nil
}

// start starts the runner's own kfake.
func start(ctx context.Context, h broker.Host) (string, broker.Process, error) {
	srv, err := kafkaserver.Start(ctx)
	if err != nil {
		return "", nil, err
	}
	h.DeferStop(srv.Discard)
	h.Logf("started kfake (franz-go's Kafka-protocol server, not Apache Kafka) pid %d at %s in %s", srv.PID(), srv.Addr(), srv.Dir)
	return srv.URL(), srv, nil
}

// kfakeNote says what the "kafka (kfake)" column shows and what it cannot.
const kfakeNote = `
## About the kafka (kfake) column

No Kafka server installs from the package sources this runner's CI may use, so the column was drilled
on **kfake**, franz-go's Kafka-protocol server (github.com/twmb/franz-go/pkg/kfake), run by the runner as
its own child process so that a kill is a real process death. The client side (franz-go: idempotent
producer with acks=all, classic consumer groups with static members and manual offset commits, share
groups) is the real thing; the server is not Apache Kafka. What kfake does not implement no drill on it
can show: replication and the ISR (an acks=all publish here is on one broker), quotas, tiered storage,
retention by time or size (only DeleteRecords). Run the library with ` + "`--kafka HOST:PORT`" + ` against a real
cluster (docker-compose.yml has one) to confirm a column for Apache Kafka.
`
