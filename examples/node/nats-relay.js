// An outbox relay on NATS JetStream (nats): publish each unpublished row,
// wait for the stream's PubAck, then mark it. A crash between the two
// publishes the row again on restart; the publish carries the event id as
// Nats-Msg-Id, so inside the stream's duplicate window JetStream drops that
// second copy itself (the PubAck says duplicate), and past it the
// consumer's inbox must absorb it.
//
// It knows nothing of the runner: NATS_URL is nats://host:port (the
// runner's ${broker.url}), SUBJECT the subject of the stream (${subject}).
'use strict';
const { Client } = require('pg');
const { connect, headers, StringCodec } = require('nats');

const subject = process.env.SUBJECT;
const db = new Client({ connectionString: process.env.DATABASE_URL });
const sc = StringCodec();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  await db.connect();
  const nc = await connect({ servers: process.env.NATS_URL, name: 'relay' });
  // A lost connection ends the relay: the outbox keeps what it had not marked.
  nc.closed().then((err) => { console.error('relay: nats connection closed', err ? err.message : ''); process.exit(1); });
  const js = nc.jetstream();
  console.log('relay ready');
  for (;;) {
    const { rows } = await db.query(
      'SELECT id, event_id, payload::text AS payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 100');
    for (const row of rows) {
      const h = headers();
      h.set('event-id', row.event_id);
      // Resolves on the PubAck: the stream stored it (or had it already).
      const ack = await js.publish(subject, sc.encode(row.payload), { headers: h, msgID: row.event_id });
      await db.query('UPDATE outbox SET published_at = now() WHERE id = $1', [row.id]);
      console.log(`published ${row.event_id} as ${ack.stream}/${ack.seq}${ack.duplicate ? ' (duplicate: the stream had it)' : ''}`);
    }
    if (rows.length === 0) await sleep(20);
  }
}

main().catch((err) => { console.error('relay:', err.message); process.exit(1); });
