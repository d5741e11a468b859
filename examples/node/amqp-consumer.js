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
// BUG=auto-ack consumes with noAck: true (basic.consume no-ack): RabbitMQ
// takes each message as acknowledged the moment it sends it. A failed
// transaction is logged and the consumer moves on (there is nothing to
// nack): a refused COMMIT loses the event the same way, with no ack ever
// sent.
//
// AMQP_URL is amqp://user:password@host:port/vhost (${broker.url}), QUEUE the
// queue, declared and bound by whoever owns the topology (${queue}: checked,
// never declared here), CONSUMER the consumer id the inbox records
// (${consumer}).
'use strict';
const { Client } = require('pg');
const inbox = require('./inbox');
const amqp = require('amqplib');

const { QUEUE: queue, CONSUMER: consumerId } = process.env;
const ackFirst = process.env.BUG === 'ack-first';
const autoAck = process.env.BUG === 'auto-ack';
const db = new Client({ connectionString: process.env.DATABASE_URL });
// A broken database connection ends the process (pg's unhandled 'error'):
// whoever supervises it starts the next, which connects again.
// BUG=no-reconnect logs the error and goes on with the dead client: every
// try of every event fails ("Client was closed and is not queryable") while
// the process looks alive: stuck.
if (process.env.BUG === 'no-reconnect') db.on('error', (err) => console.error('consumer: database:', err.message));

const apply = (eventId, payload) => inbox.apply(db, consumerId, eventId, payload);

async function handle(ch, msg) {
  const eventId = msg.properties.messageId;
  const where = `delivery ${msg.fields.deliveryTag}${msg.fields.redelivered ? ', redelivered' : ''}`;
  if (ackFirst) ch.ack(msg);
  try {
    console.log(`${await apply(eventId, msg.content.toString())} ${eventId} (${where})`);
  } catch (err) {
    if (autoAck) { // the broker took it as acked when it sent it
      console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); auto-acked at delivery, nothing to nack, moving on`);
      return;
    }
    if (ackFirst) { // acked already: the event is gone
      console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); acked already, moving on`);
      return;
    }
    console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); nack with requeue, it comes again`);
    ch.nack(msg, false, true);
    return;
  }
  if (!ackFirst && !autoAck) ch.ack(msg);
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
  }, { noAck: autoAck });
  console.log('consumer ready');
}

main().catch((err) => { console.error('consumer:', err.message); process.exit(1); });
