package main

import (
	"context"
	"github.com/outboxdrill/runner/broker/kinds"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/system"
)

// initExample is one example team init is run on: its services' command
// lines (run from this package's directory), schemas and hand-written
// system file, the broker, and the BUG its seed-2 starter must expose.
type initExample struct {
	dir, relay, consumer, handWritten, broker, bug string
	extra                                          []string // more flags of init and run (a broker's URL)
}

// runInit runs `runner init` on ex into a temp dir, and checks what it
// wrote against the example's hand-written system file: the same mapping
// keys. Then it runs the starter scenarios on the correct services (they
// pass) and seed 2 on ex.bug's build (it fails, the event lost), in one
// run.
func runInit(t *testing.T, ex initExample) {
	t.Helper()
	out := t.TempDir()
	d := "../../examples/" + ex.dir + "/"
	args := append([]string{"init", "--broker", ex.broker, "--relay", ex.relay, "--consumer", ex.consumer,
		"--schema-producer", d + "producer.sql", "--schema-consumer", d + "consumer.sql", "--out", out}, ex.extra...)
	code, stdout, stderr := cli(t, args...)
	if code != exitOK || !strings.Contains(stdout, "--- PASS: your relay and consumer, fault-free") || !strings.Contains(stdout, "init: first green drill ") {
		t.Fatalf("init: exit %d, want 0 with the fault-free drill passed:\n%s\n%s", code, stdout, stderr)
	}
	written := filepath.Join(out, "system.yaml")
	right, all := sameKeys(t, written, d+ex.handWritten)
	t.Logf("%s on %s: %d of %d mapping keys as the hand-written %s; %s", ex.dir, ex.broker, right, all, ex.handWritten, lineOf(stdout, "init: first green drill"))
	if right != all {
		t.Errorf("init wrote %d of %d keys as %s does:\n%s", right, all, ex.handWritten, mustRead(t, written))
	}
	seed2 := mustRead(t, filepath.Join(out, "scenarios", "seed-2-consumer-commit-fails.yaml"))
	buggy := strings.Replace(seed2, "start: {service: consumer, fault", "start: {service: consumer, env: {BUG: "+ex.bug+"}, fault", 1)
	buggy = strings.Replace(strings.Replace(buggy, "within: 20s}", "within: 3s}", 1), "system: ../system.yaml", "system: "+written, 1)
	// Lost is judged once settled: a short settle: the wait for nothing.
	buggy = strings.Replace(buggy, `name: "`, "settle: 2s\nname: \"BUG="+ex.bug+": ", 1)
	if strings.Count(buggy, "BUG") != 2 || !strings.Contains(buggy, "within: 3s}") {
		t.Fatalf("seed 2 is not written as this test rewrites it:\n%s", seed2)
	}
	runArgs := append([]string{"run", "--parallel", "5", "--broker", ex.broker}, ex.extra...)
	code, stdout, stderr = cli(t, append(runArgs, filepath.Join(out, "scenarios"), scenarioFile(t, "bug.yaml", buggy))...)
	if code != exitFailed || !strings.Contains(stdout, "4 passed, 1 failed") || !strings.Contains(block(stdout, "--- FAIL: BUG="+ex.bug), "lost: consumer accounting, event bus-1") {
		t.Errorf("the starter scenarios: exit %d, want 1 with the four passed and BUG=%s's seed 2 lost:\n%s\n%s", code, ex.bug, stdout, stderr)
	}
}

// sameKeys counts the mapping keys the two system files give alike:
// produce, the outbox's, stream's and inbox's fields, projection, brokers.
func sameKeys(t *testing.T, got, want string) (right, all int) {
	t.Helper()
	var sys [2]*system.System
	for i, f := range []string{got, want} {
		s, errs, err := system.Load(context.Background(), f, kinds.All())
		if err != nil || len(errs) > 0 {
			t.Fatalf("%s: %v %v", f, err, errs)
		}
		sys[i] = s
	}
	pairs := func(s *system.System) []string {
		return []string{s.Produce, s.Outbox.Table, s.Outbox.EventID, s.Outbox.Payload, s.Outbox.Unpublished,
			s.Stream.EventID, s.Stream.Payload, s.Inbox.Table, s.Inbox.Consumer, s.Inbox.EventID, s.Inbox.Payload,
			s.Projection, strings.Join(s.Brokers, ",")}
	}
	g, w := pairs(sys[0]), pairs(sys[1])
	for i := range w {
		if w[i] == "" && g[i] == "" {
			continue // stream: on a broker that needs none
		}
		all++
		if g[i] == w[i] {
			right++
		}
	}
	return right, all
}

func TestInitPython(t *testing.T) {
	t.Parallel()
	if !pythonReady(t) {
		t.Skip("/usr/bin/python3 lacks psycopg2 or redis: apt-get install python3-psycopg2 python3-redis")
	}
	d := "../../examples/python/"
	runInit(t, initExample{dir: "python", broker: "redis", handWritten: "system.yaml", bug: "ack-first",
		relay:    "DATABASE_URL=${producer_db.url} REDIS_URL=${broker.url} STREAM=${stream} /usr/bin/python3 -u " + d + "relay.py",
		consumer: "DATABASE_URL=${consumer_db.url} REDIS_URL=${broker.url} STREAM=${stream} GROUP=${consumer} /usr/bin/python3 -u " + d + "consumer.py"})
}

func TestInitGoPayments(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "PAYMENTS_BIN", paymentsService(t))
	d := "../../examples/go-payments/"
	runInit(t, initExample{dir: "go-payments", broker: "redis", handWritten: "system.yaml", bug: "ack-first",
		relay:    "DATABASE_URL=${producer_db.url} REDIS_URL=${broker.url} STREAM=${stream} " + d + "run.sh relay",
		consumer: "DATABASE_URL=${consumer_db.url} REDIS_URL=${broker.url} STREAM=${stream} GROUP=${group} " + d + "run.sh consumer"})
}

func TestInitNode(t *testing.T) {
	needNode(t, "ioredis", "pg")
	t.Parallel()
	d := "../../examples/node/"
	runInit(t, initExample{dir: "node", broker: "redis", handWritten: "system.yaml", bug: "ack-first",
		relay:    "DATABASE_URL=${producer_db.url} REDIS_URL=${broker.url} STREAM=${stream} node " + d + "relay.js",
		consumer: "DATABASE_URL=${consumer_db.url} REDIS_URL=${broker.url} STREAM=${stream} GROUP=${consumer} node " + d + "consumer.js"})
}

// The Node team on NATS JetStream: no stream: fields (the event-id
// header carries the id), the consumer's durable read as ${group}.
func TestInitNodeNATS(t *testing.T) {
	needNode(t, "nats", "pg")
	t.Parallel()
	d := "../../examples/node/"
	runInit(t, initExample{dir: "node", broker: "nats", handWritten: "system-nats.yaml", bug: "ack-first",
		extra:    []string{"--nats", testservers.URL(t, "nats")},
		relay:    "DATABASE_URL=${producer_db.url} NATS_URL=${broker.url} SUBJECT=${subject} node " + d + "nats-relay.js",
		consumer: "DATABASE_URL=${consumer_db.url} NATS_URL=${broker.url} STREAM=${stream_name} DURABLE=${group} CONSUMER=${consumer} node " + d + "nats-consumer.js"})
}

// The Node team on RabbitMQ: the relay publishes to ${exchange} with
// publisher confirms, the consumer reads ${queue}.
func TestInitNodeRabbitMQ(t *testing.T) {
	needNode(t, "amqplib", "pg")
	t.Parallel()
	d := "../../examples/node/"
	runInit(t, initExample{dir: "node", broker: "rabbitmq", handWritten: "system-rabbitmq.yaml", bug: "ack-first",
		extra:    []string{"--rabbitmq", testservers.URL(t, "rabbitmq")},
		relay:    "DATABASE_URL=${producer_db.url} AMQP_URL=${broker.url} EXCHANGE=${exchange} node " + d + "amqp-relay.js",
		consumer: "DATABASE_URL=${consumer_db.url} AMQP_URL=${broker.url} QUEUE=${queue} CONSUMER=${consumer} node " + d + "amqp-consumer.js"})
}

// The Node team on Kafka (the runner's kfake): the relay writes ${topic},
// the consumer's group is ${group}; its classic mistake commits the offset
// first.
func TestInitNodeKafka(t *testing.T) {
	needNode(t, "kafkajs", "pg")
	t.Parallel()
	d := "../../examples/node/"
	runInit(t, initExample{dir: "node", broker: "kafka", handWritten: "system-kafka.yaml", bug: "commit-first",
		extra:    []string{"--kafka", testservers.URL(t, "kafka")},
		relay:    "DATABASE_URL=${producer_db.url} BROKERS=${broker.address} TOPIC=${topic} node " + d + "kafka-relay.js",
		consumer: "DATABASE_URL=${consumer_db.url} BROKERS=${broker.address} TOPIC=${topic} GROUP=${group} CONSUMER=${consumer} node " + d + "kafka-consumer.js"})
}

// What init cannot infer is an error naming what to add, exit 2, nothing
// written; a file it would write that is there is refused without --force.
func TestInitSaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	noInbox := filepath.Join(out, "consumer.sql")
	if err := os.WriteFile(noInbox, []byte("CREATE TABLE totals (currency text PRIMARY KEY, amount bigint NOT NULL);\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"init", "--relay", "true", "--consumer", "true", "--schema-producer", "../../examples/node/producer.sql", "--schema-consumer", noInbox, "--out", out}
	code, stdout, stderr := cli(t, args...)
	if code != exitInvalid || !strings.Contains(stderr, "--schema-consumer: no table looks like an inbox: one needs a unique index or primary key over a consumer column") ||
		!strings.Contains(stderr, "tables: totals (currency text, amount bigint)") || exists(filepath.Join(out, "system.yaml")) {
		t.Errorf("no inbox: exit %d, want 2 naming what an inbox needs, nothing written:\n%s\n%s", code, stdout, stderr)
	}
	if err := os.WriteFile(filepath.Join(out, "system.yaml"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli(t, args...)
	if code != exitInvalid || !strings.Contains(stderr, "system.yaml: there already (--force overwrites)") || mustRead(t, filepath.Join(out, "system.yaml")) != "mine\n" {
		t.Errorf("a system.yaml there: exit %d, want 2, the file kept:\n%s", code, stderr)
	}
	code, _, stderr = cli(t, "init", "--relay", "PGURL='unterminated", "--consumer", "true", "--schema-producer", "a", "--schema-consumer", "b")
	if code != exitInvalid || !strings.Contains(stderr, "--relay: unterminated ' quote") {
		t.Errorf("a bad command line: exit %d, want 2 saying so:\n%s", code, stderr)
	}
	code, _, stderr = cli(t, "init", "--compose", "docker-compose.yml", "--relay", "x", "--schema-producer", "a", "--schema-consumer", "b")
	if code != exitInvalid || !strings.Contains(stderr, "--compose gives the command lines: no --relay or --consumer with it") {
		t.Errorf("--compose and --relay: exit %d, want 2 saying so:\n%s", code, stderr)
	}
}

// The reference processes (runner reference relay|consumer, told
// ${runner}) with a second table shaped like an outbox beside theirs:
// --outbox picks theirs, and the other is written as an alternative, as
// is the second column their relay marks.
func TestInitPicksAmongOutboxes(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	out := t.TempDir()
	producer := filepath.Join(out, "producer.sql")
	ddl := mustRead(t, "../../sql/producer.sql") + "\nCREATE TABLE audit_outbox (key text PRIMARY KEY, data jsonb NOT NULL, sent boolean NOT NULL DEFAULT false);\n"
	if err := os.WriteFile(producer, []byte(ddl), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(t, "init", "--outbox", "outbox", "--out", out, "--schema-producer", producer, "--schema-consumer", "../../sql/consumer.sql",
		"--relay", "DATABASE_URL=${producer_db.url} REDIS_URL=${broker.url} STREAM=${stream} ${runner} reference relay",
		"--consumer", "DATABASE_URL=${consumer_db.url} REDIS_URL=${broker.url} STREAM=${stream} GROUP=${consumer} ${runner} reference consumer")
	if code != exitOK {
		t.Fatalf("exit %d, want 0:\n%s\n%s", code, stdout, stderr)
	}
	written := filepath.Join(out, "system.yaml")
	if right, all := sameKeys(t, written, "../../examples/reference/system.yaml"); right != all {
		t.Errorf("%d of %d keys as examples/reference/system.yaml:\n%s", right, all, mustRead(t, written))
	}
	text := mustRead(t, written)
	for _, want := range []string{
		`# or: outbox: {table: audit_outbox, event_id: key, payload: data, unpublished: "NOT sent"}   (shaped like an outbox too; the probe went into outbox, which the relay published)`,
		`# or: outbox: {table: outbox, event_id: event_id, payload: payload, unpublished: "published_at IS NULL"}   (that column changed too)`,
		`run: ["${runner}", reference, relay]`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("want %q in:\n%s", want, text)
		}
	}
	code, _, stderr = cli(t, "init", "--outbox", "outbx", "--force", "--out", out, "--schema-producer", producer, "--schema-consumer", "../../sql/consumer.sql", "--relay", "true", "--consumer", "true")
	if code != exitInvalid || !strings.Contains(stderr, "--outbox outbx: no such table shaped like an outbox in --schema-producer; those that are: audit_outbox, outbox") {
		t.Errorf("--outbox naming no outbox: exit %d, want 2 naming the candidates:\n%s", code, stderr)
	}
}
