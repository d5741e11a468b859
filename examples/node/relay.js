// An outbox relay: publish each unpublished row with XADD, then mark it.
// A crash between the two publishes the row again on restart: the
// consumer's inbox must absorb that duplicate.
'use strict';
const { Client } = require('pg');
const Redis = require('ioredis');

const stream = process.env.STREAM;
const db = new Client({ connectionString: process.env.DATABASE_URL });
const redis = new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: 0 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  await db.connect();
  console.log('relay ready');
  for (;;) {
    const { rows } = await db.query(
      'SELECT id, event_id, payload::text AS payload FROM outbox WHERE published_at IS NULL ORDER BY id LIMIT 100');
    for (const row of rows) {
      const entry = await redis.xadd(stream, '*', 'event_id', row.event_id, 'payload', row.payload);
      await db.query('UPDATE outbox SET published_at = now() WHERE id = $1', [row.id]);
      console.log(`published ${row.event_id} as ${entry}`);
    }
    if (rows.length === 0) await sleep(20);
  }
}

main().catch((err) => { console.error('relay:', err.message); process.exit(1); });
