// An inbox consumer on RabbitMQ (amqplib): it consumes its queue with manual
// acks, and for each message ONE transaction inserts the inbox row (keyed by
// business event id, the message_id property) and updates the read model;
// only after its COMMIT is the message acked (basic.ack). A transaction that
// fails is nacked with requeue (basic.nack): RabbitMQ delivers it again at
// once. A consumer killed before its ack loses its channel, and RabbitMQ
// requeues what the channel held.
//
// BUG=ack-first turns it into the classic mistake: ack first, then the
// transaction, and log a failed one and move on. A refused COMMIT then loses
// the event for good: the queue has nothing left to deliver.
//
// AMQP_URL is amqp://user:password@host:port/vhost (${broker.url}), QUEUE the
// queue, declared and bound by whoever owns the topology (${queue}: checked,
// never declared here), CONSUMER the consumer id the inbox records
// (${consumer}).
'use strict';
const { Client } = require('pg');
const amqp = require('amqplib');

const { QUEUE: queue, CONSUMER: consumerId } = process.env;
const ackFirst = process.env.BUG === 'ack-first';
const db = new Client({ connectionString: process.env.DATABASE_URL });

async function apply(eventId, payload) {
  await db.query('BEGIN');
  try {
    const ins = await db.query(
      'INSERT INTO inbox (consumer_id, event_id, payload) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
      [consumerId, eventId, payload]);
    if (ins.rowCount === 1) {
      const p = JSON.parse(payload);
      await db.query(
        `INSERT INTO projection (consumer_id, currency, amount, events) VALUES ($1, $2, $3, 1)
         ON CONFLICT (consumer_id, currency)
         DO UPDATE SET amount = projection.amount + EXCLUDED.amount, events = projection.events + 1`,
        [consumerId, p.currency, p.amount]);
    }
    await db.query('COMMIT');
    return ins.rowCount === 1 ? 'applied' : 'duplicate';
  } catch (err) {
    await db.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

async function handle(ch, msg) {
  const eventId = msg.properties.messageId;
  const where = `delivery ${msg.fields.deliveryTag}${msg.fields.redelivered ? ', redelivered' : ''}`;
  if (ackFirst) ch.ack(msg);
  try {
    console.log(`${await apply(eventId, msg.content.toString())} ${eventId} (${where})`);
  } catch (err) {
    if (ackFirst) { // acked already: the event is gone
      console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); acked already, moving on`);
      return;
    }
    console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); nack with requeue, it comes again`);
    ch.nack(msg, false, true);
    return;
  }
  if (!ackFirst) ch.ack(msg);
}

async function main() {
  await db.connect();
  const conn = await amqp.connect(process.env.AMQP_URL);
  conn.on('close', () => { console.error('consumer: amqp connection closed'); process.exit(1); });
  conn.on('error', (err) => console.error('consumer: amqp:', err.message));
  const ch = await conn.createChannel();
  ch.on('error', (err) => console.error('consumer: amqp channel:', err.message));
  await ch.checkQueue(queue); // passive: the queue and its binding are the runner's
  await ch.prefetch(1);
  // One message at a time on the one database connection, in delivery order.
  let chain = Promise.resolve();
  await ch.consume(queue, (msg) => {
    if (msg === null) { console.error('consumer: the broker cancelled the consumer'); process.exit(1); }
    chain = chain.then(() => handle(ch, msg)).catch((err) => { console.error('consumer:', err.message); process.exit(1); });
  }, { noAck: false });
  console.log('consumer ready');
}

main().catch((err) => { console.error('consumer:', err.message); process.exit(1); });
