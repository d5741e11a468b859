// An outbox relay on Kafka (kafkajs): produce each unpublished row, keyed by
// its event id, then mark it. A crash between the two produces the row
// again on restart: the consumer's inbox must absorb that duplicate.
//
// TXN=1 produces each row in a Kafka transaction (transactionalId, KIP-98),
// committed before the mark: the topic then holds a commit marker after
// each record, which a read_committed consumer never gets.
//
// It knows nothing of the runner: BROKERS is host:port[,host:port] (the
// runner's ${broker.address}), TOPIC the topic to produce to (${topic}).
'use strict';
const { Client } = require('pg');
const { Kafka, Partitioners, logLevel } = require('kafkajs');

const topic = process.env.TOPIC;
const db = new Client({ connectionString: process.env.DATABASE_URL });
const kafka = new Kafka({ clientId: 'relay', brokers: process.env.BROKERS.split(','), logLevel: logLevel.WARN });
const txn = process.env.TXN === '1';
const producer = kafka.producer({
  createPartitioner: Partitioners.DefaultPartitioner,
  ...(txn ? { transactionalId: `relay-${topic}`, idempotent: true, maxInFlightRequests: 1 } : {}),
});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// produce sends one record, in its own committed transaction with TXN=1.
async function produce(message) {
  if (!txn) return producer.send({ topic, acks: -1, messages: [message] });
  const t = await producer.transaction();
  try {
    const meta = await t.send({ topic, acks: -1, messages: [message] });
    await t.commit();
    return meta;
  } catch (err) {
    await t.abort().catch(() => {});
    throw err;
  }
}

async function main() {
  await db.connect();
  await producer.connect();
  console.log('relay ready');
  for (;;) {
    const { rows } = await db.query(
      'SELECT id, event_id, payload::text AS payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 100');
    for (const row of rows) {
      const [meta] = await produce({ key: row.event_id, value: row.payload });
      await db.query('UPDATE outbox SET published_at = now() WHERE id = $1', [row.id]);
      console.log(`published ${row.event_id} at ${meta.partition}/${meta.baseOffset}`);
    }
    if (rows.length === 0) await sleep(20);
  }
}

main().catch((err) => { console.error('relay:', err.message); process.exit(1); });
