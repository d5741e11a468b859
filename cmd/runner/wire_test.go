package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testservers"
)

// A relay on NATS that publishes with no event id where the runner looks
// (no event-id header, no Nats-Msg-Id): the history read from the wire
// would be about an event "" (a double publish, a loss), so the scenario
// fails saying what the messages lacked, never with a made-up verdict.
func TestAMessageWithoutAnEventIDIsSaidSo(t *testing.T) {
	t.Parallel()
	modules, err := filepath.Abs("../../examples/node/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	needNode(t, "nats")
	schema, err := filepath.Abs("../../examples/node")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	relay := `const { Client } = require('pg');
const { connect, StringCodec } = require('nats');
(async () => {
  const db = new Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  const js = (await connect({ servers: process.env.NATS_URL })).jetstream();
  console.log('relay ready');
  for (;;) {
    const { rows } = await db.query('SELECT id, payload::text AS payload FROM outbox WHERE published_at IS NULL');
    for (const r of rows) {
      await js.publish(process.env.SUBJECT, StringCodec().encode(r.payload)); // no headers: no event id
      await db.query('UPDATE outbox SET published_at = now() WHERE id = $1', [r.id]);
    }
    await new Promise((res) => setTimeout(res, 20));
  }
})().catch((e) => { console.error(e.message); process.exit(1); });
`
	if err := os.WriteFile(filepath.Join(dir, "relay.js"), []byte(relay), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(dir, "system.yaml")
	if err := os.WriteFile(sys, []byte(`services:
  relay: {run: [node, relay.js], env: {DATABASE_URL: "${producer_db.url}", NATS_URL: "${broker.url}", SUBJECT: "${subject}", NODE_PATH: "`+modules+`"}, ready: {log: "relay ready"}}
schema: {producer: `+schema+`/producer.sql, consumer: `+schema+`/consumer.sql}
produce: "INSERT INTO outbox (event_id, payload) VALUES (${event}, ${payload}::jsonb)"
outbox: {table: outbox, event_id: event_id, payload: payload, unpublished: "published_at IS NULL"}
inbox: {table: inbox, consumer: consumer_id, event_id: event_id, payload: payload}
projection: "SELECT consumer_id, currency, amount, events FROM projection"
brokers: [nats]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sc := scenarioFile(t, "no-id.yaml", "name: no event id on the wire\nsystem: "+sys+"\nsteps:\n  - produce(event=bus-1)\n  - produce(event=bus-2)\n  - start: relay\n  - expect: {outbox.unpublished: 0, stream.entries: 2, within: 10s}\n")
	code, out, errOut := cli(t, "run", "--broker", "nats", "--nats", testservers.URL(t, "nats"), sc)
	want := "stream: service relay: PubAck carried no event id where the runner looks for it: the event-id header, else Nats-Msg-Id (2 such messages)"
	if code != exitFailed || !strings.Contains(out, want) {
		t.Fatalf("exit %d, want 1 and %q in:\n%s\n%s", code, want, out, errOut)
	}
	if strings.Contains(out, "double_published:") || strings.Contains(out, "lost:") || !strings.Contains(out, "history: not judged: acked_without_effect, double_applied, double_published, gap, lost,") {
		t.Errorf("a verdict about an event without an id, or no word that none was judged:\n%s", out)
	}
}

// A step's trace names the broker's own operation (broker.Kind.Verbs):
// the relay's publish is a JetStream publish on NATS and a basic.publish on
// RabbitMQ, never an XADD there; on Redis it is the XADD.
func TestTracesNameEachBrokersOperation(t *testing.T) {
	t.Parallel()
	sc := scenarioFile(t, "verbs.yaml", "name: verbs\nsteps:\n  - produce(event=bus-1)\n  - relay\n  - consume\n  - expect: {inbox.rows: 1}\n")
	code, out, errOut := cli(t, "run", "-v", "--broker", "redis,nats,rabbitmq", "--nats", testservers.URL(t, "nats"), "--rabbitmq", testservers.URL(t, "rabbitmq"), sc)
	if code != exitOK {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errOut)
	}
	for label, want := range map[string]string{"redis": "XADD bus-1 → entry ", "nats": "PUB (PubAck) bus-1 → entry ", "rabbitmq": "basic.publish (confirm) bus-1 → entry "} {
		got := block(out, "--- PASS: verbs ["+label+"]")
		if !strings.Contains(got, want) || label != "redis" && strings.Contains(got, "XADD") {
			t.Errorf("%s: want %q and no XADD in:\n%s", label, want, got)
		}
	}
}
