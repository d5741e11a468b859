// An inbox consumer: for each entry, ONE transaction inserts the inbox row
// (keyed by business event id) and updates the read model; only after its
// COMMIT is the entry acknowledged. Entries a dead worker left pending are
// reclaimed after a second.
//
// BUG=ack-first turns it into the classic mistake: XACK first, then the
// transaction. A failed COMMIT then loses the event for good.
'use strict';
const { Client } = require('pg');
const Redis = require('ioredis');

const stream = process.env.STREAM;
const group = process.env.GROUP;
const me = `w${process.pid}`;
const ackFirst = process.env.BUG === 'ack-first';
const db = new Client({ connectionString: process.env.DATABASE_URL });
// A broken database connection ends the process (pg's unhandled 'error'):
// whoever supervises it starts the next, which connects again.
// BUG=no-reconnect logs the error and goes on with the dead client: every
// try of every event fails ("Client was closed and is not queryable") while
// the process looks alive: stuck.
if (process.env.BUG === 'no-reconnect') db.on('error', (err) => console.error('consumer: database:', err.message));
const redis = new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: 0 });

async function handle(id, fields) {
  const f = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]] = fields[i + 1];
  if (ackFirst) await redis.xack(stream, group, id);
  try {
    await db.query('BEGIN');
    const ins = await db.query(
      'INSERT INTO inbox (consumer_id, event_id, payload) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
      [group, f.event_id, f.payload]);
    if (ins.rowCount === 0) {
      // Seen before: the same event again is a duplicate; the same id with
      // another payload is an identity conflict, left pending for a human.
      const { rows } = await db.query(
        'SELECT payload = $3::jsonb AS same FROM inbox WHERE consumer_id = $1 AND event_id = $2',
        [group, f.event_id, f.payload]);
      if (!rows[0].same) {
        await db.query('ROLLBACK');
        console.log(`${f.event_id}: identity conflict (${id} carries another payload); left pending`);
        return;
      }
    }
    if (ins.rowCount === 1) {
      const p = JSON.parse(f.payload);
      await db.query(
        `INSERT INTO projection (consumer_id, currency, amount, events) VALUES ($1, $2, $3, 1)
         ON CONFLICT (consumer_id, currency)
         DO UPDATE SET amount = projection.amount + EXCLUDED.amount, events = projection.events + 1`,
        [group, p.currency, p.amount]);
    }
    await db.query('COMMIT');
  } catch (err) {
    await db.query('ROLLBACK').catch(() => {});
    console.log(`${f.event_id}: rolled back (${err.code || ''} ${err.message}); it stays pending`);
    return;
  }
  if (!ackFirst) await redis.xack(stream, group, id);
  console.log(`applied or deduplicated ${f.event_id} (${id})`);
}

async function main() {
  await db.connect();
  try {
    await redis.xgroup('CREATE', stream, group, '0', 'MKSTREAM');
  } catch (err) {
    if (!String(err.message).includes('BUSYGROUP')) throw err;
  }
  console.log('consumer ready');
  for (;;) {
    const [, stale] = await redis.xautoclaim(stream, group, me, 1000, '0-0', 'COUNT', 10);
    for (const [id, fields] of stale) if (fields) await handle(id, fields);
    const res = await redis.xreadgroup('GROUP', group, me, 'COUNT', 10, 'BLOCK', 100, 'STREAMS', stream, '>');
    for (const [, entries] of res || []) for (const [id, fields] of entries) await handle(id, fields);
  }
}

main().catch((err) => { console.error('consumer:', err.message); process.exit(1); });
