// An inbox consumer on NATS JetStream (nats): it creates its durable pull
// consumer on the stream (explicit acks, from the first message, a short
// AckWait), and for each message ONE transaction inserts the inbox row
// (keyed by business event id, the event-id header) and updates the read
// model; only after its COMMIT is the message acked (+ACK). A transaction
// that fails is naked (-NAK): JetStream delivers the message again at once.
// A consumer killed before its ack gets it again after AckWait.
//
// BUG=ack-first turns it into the classic mistake: ack first, then the
// transaction, and log a failed one and move on. A refused COMMIT then loses
// the event for good: the stream has nothing left to deliver.
//
// BUG=auto-ack creates the durable consumer with ack_policy none (AckNone):
// JetStream takes each message as acknowledged the moment it delivers it.
// A failed transaction is logged and the consumer moves on (there is
// nothing to nak): a refused COMMIT loses the event the same way, with no
// ack ever sent.
//
// NATS_URL is nats://host:port (${broker.url}), STREAM the stream
// (${stream_name}), DURABLE the durable consumer's name (${group}), CONSUMER
// the consumer id the inbox records (${consumer}).
'use strict';
const { Client } = require('pg');
const inbox = require('./inbox');
const { connect, AckPolicy, DeliverPolicy, StringCodec, nanos } = require('nats');

const { STREAM: stream, DURABLE: durable, CONSUMER: consumerId } = process.env;
const ackFirst = process.env.BUG === 'ack-first';
const autoAck = process.env.BUG === 'auto-ack';
const ackWaitMs = Number(process.env.ACK_WAIT_MS || 2000);
const db = new Client({ connectionString: process.env.DATABASE_URL });
// A broken database connection ends the process (pg's unhandled 'error'):
// whoever supervises it starts the next, which connects again.
// BUG=no-reconnect logs the error and goes on with the dead client: every
// try of every event fails ("Client was closed and is not queryable") while
// the process looks alive: stuck.
if (process.env.BUG === 'no-reconnect') db.on('error', (err) => console.error('consumer: database:', err.message));
const sc = StringCodec();

const apply = (eventId, payload) => inbox.apply(db, consumerId, eventId, payload);

async function handle(m) {
  const eventId = m.headers && m.headers.get('event-id');
  const where = `${m.info.stream}/${m.seq}, delivery ${m.info.redeliveryCount}`;
  if (ackFirst) await m.ackAck();
  try {
    console.log(`${await apply(eventId, sc.decode(m.data))} ${eventId} (${where})`);
  } catch (err) {
    if (autoAck) { // JetStream took it as acked when it delivered it
      console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); acked at delivery (AckNone), nothing to nak, moving on`);
      return;
    }
    if (ackFirst) { // acked already: the event is gone
      console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); acked already, moving on`);
      return;
    }
    console.log(`${eventId}: rolled back (${err.code || ''} ${err.message}); nak, it comes again`);
    m.nak();
    return;
  }
  if (!ackFirst && !autoAck) await m.ackAck();
}

async function main() {
  await db.connect();
  const nc = await connect({ servers: process.env.NATS_URL, name: 'consumer' });
  nc.closed().then((err) => { console.error('consumer: nats connection closed', err ? err.message : ''); process.exit(1); });
  const jsm = await nc.jetstreamManager();
  // Idempotent: a restarted consumer adds the same configuration again.
  await jsm.consumers.add(stream, {
    durable_name: durable,
    ack_policy: autoAck ? AckPolicy.None : AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(ackWaitMs),
  });
  const c = await nc.jetstream().consumers.get(stream, durable);
  // One message at a time: a message's AckWait runs from its delivery, so
  // one that waited in a client-side buffer behind slow work would be
  // redelivered while still unhandled. Pulls expire after 5 s (nats.js's
  // default is 30 s): a delivery lost on its way (the server counts it
  // handed out, so the pull is spent and sends no more heartbeats) is
  // noticed by two missed idle heartbeats, half the expiry each, and
  // pulled again; with 30 s the consumer would sit idle that long.
  const messages = await c.consume({ max_messages: 1, expires: 5000 });
  console.log('consumer ready');
  for await (const m of messages) await handle(m);
}

main().catch((err) => { console.error('consumer:', err.message); process.exit(1); });
