// The inbox transaction every broker's consumer runs: ONE transaction
// inserts the inbox row keyed by (consumer id, business event id) and, if
// the row is new, moves the read model. A duplicate changes nothing. The
// caller acks only after this returns (its BUG=ack-first twin, before).
'use strict';

async function apply(db, consumerId, eventId, payload) {
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

module.exports = { apply };
