// An outbox relay on RabbitMQ (amqplib): publish each unpublished row to the
// exchange on a confirm channel, wait for the broker's publisher confirm,
// then mark it. A crash between the two publishes the row again on restart:
// RabbitMQ stores both copies, and the consumer's inbox must absorb that
// duplicate.
//
// It knows nothing of the runner: AMQP_URL is amqp://user:password@host:port/vhost
// (the runner's ${broker.url}), EXCHANGE the exchange to publish to
// (${exchange}; a fanout, so the routing key is "").
'use strict';
const { Client } = require('pg');
const amqp = require('amqplib');

const exchange = process.env.EXCHANGE;
const db = new Client({ connectionString: process.env.DATABASE_URL });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Resolves on the broker's basic.ack for this publish, rejects on its nack.
const publish = (ch, content, options) => new Promise((resolve, reject) => {
  ch.publish(exchange, '', content, options, (err) => (err ? reject(err) : resolve()));
});

async function main() {
  await db.connect();
  const conn = await amqp.connect(process.env.AMQP_URL);
  // A lost connection ends the relay: the outbox keeps what it had not marked.
  conn.on('close', () => { console.error('relay: amqp connection closed'); process.exit(1); });
  conn.on('error', (err) => console.error('relay: amqp:', err.message));
  const ch = await conn.createConfirmChannel();
  ch.on('error', (err) => console.error('relay: amqp channel:', err.message));
  console.log('relay ready');
  for (;;) {
    const { rows } = await db.query(
      'SELECT id, event_id, payload::text AS payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 100');
    for (const row of rows) {
      await publish(ch, Buffer.from(row.payload), {
        messageId: row.event_id, persistent: true, contentType: 'application/json',
      });
      await db.query('UPDATE outbox SET published_at = now() WHERE id = $1', [row.id]);
      console.log(`published ${row.event_id} (confirmed)`);
    }
    if (rows.length === 0) await sleep(20);
  }
}

main().catch((err) => { console.error('relay:', err.message); process.exit(1); });
