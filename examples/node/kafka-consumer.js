// An inbox consumer on Kafka (kafkajs): for each record, ONE transaction
// inserts the inbox row (keyed by business event id, the record key) and
// updates the read model; only after its COMMIT is the offset committed.
// A transaction that fails is retried (kafkajs runs the record again): the
// offset never passes a record whose effect is not durable.
//
// BUG=commit-first turns it into the classic mistake: commit the offset
// first, then the transaction, and log a failed one and move on. A refused
// COMMIT then loses the event for good: the group is past it.
//
// BUG=auto-commit leaves committing to kafkajs (autoCommit: true) and its
// handler catches a failed transaction, logs it and returns: kafkajs takes
// the record as processed and commits past it (OffsetCommit) after the
// batch. A refused COMMIT loses the event the same way.
//
// BROKERS is host:port[,host:port] (${broker.address}), TOPIC the topic
// (${topic}), GROUP the consumer group (${group}), CONSUMER the consumer id
// the inbox records (${consumer}).
'use strict';
const { Client } = require('pg');
const inbox = require('./inbox');
const { Kafka, logLevel } = require('kafkajs');

const { TOPIC: topic, GROUP: group, CONSUMER: consumerId } = process.env;
// ack-first is the same mistake in every example's words.
const commitFirst = process.env.BUG === 'commit-first' || process.env.BUG === 'ack-first';
const autoCommit = process.env.BUG === 'auto-commit';
// Kafka's smallest session by default (group.min.session.timeout.ms): a
// restarted consumer joins once the killed one's session has run out.
const sessionTimeout = Number(process.env.SESSION_TIMEOUT_MS || 6000);
const db = new Client({ connectionString: process.env.DATABASE_URL });
// A broken database connection ends the process (pg's unhandled 'error'):
// whoever supervises it starts the next, which connects again.
// BUG=no-reconnect logs the error and goes on with the dead client: every
// try of every event fails ("Client was closed and is not queryable") while
// the process looks alive: stuck.
if (process.env.BUG === 'no-reconnect') db.on('error', (err) => console.error('consumer: database:', err.message));
const kafka = new Kafka({ clientId: 'consumer', brokers: process.env.BROKERS.split(','), logLevel: logLevel.WARN });
const consumer = kafka.consumer({ groupId: group, sessionTimeout, heartbeatInterval: sessionTimeout / 6 });

const apply = (eventId, payload) => inbox.apply(db, consumerId, eventId, payload);

async function handle({ partition, message }) {
  const eventId = message.key.toString();
  const next = [{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }];
  if (commitFirst) await consumer.commitOffsets(next);
  try {
    console.log(`${await apply(eventId, message.value.toString())} ${eventId} (${partition}/${message.offset})`);
  } catch (err) {
    console.log(`${eventId}: rolled back (${err.code || ''} ${err.message})`);
    if (commitFirst) return; // the offset is committed already: the event is gone
    if (autoCommit) { // returning tells kafkajs the record is done: it commits past it
      console.log(`${eventId}: moving on; kafkajs auto-commits past it`);
      return;
    }
    throw err; // kafkajs runs the record again; the offset stays before it
  }
  if (!commitFirst && !autoCommit) await consumer.commitOffsets(next);
}

async function main() {
  await db.connect();
  consumer.on(consumer.events.GROUP_JOIN, () => console.log('consumer ready'));
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({ autoCommit, eachMessage: handle });
}

main().catch((err) => { console.error('consumer:', err.message); process.exit(1); });
