// Package schema embeds the producer and consumer database schemas, so the
// runner binary carries them and a scenario never depends on the working
// directory. It lives in sql/ beside the two .sql files it embeds (go:embed
// reaches no parent directory); its name says what it holds, and is not
// database/sql's.
package schema

import _ "embed"

// Producer is the schema of the producer database: accounts, journal,
// ledger entries and the outbox.
//
//go:embed producer.sql
var Producer string

// Consumer is the schema of the consumer database: inbox and projection.
//
//go:embed consumer.sql
var Consumer string

// ResetProducer empties every producer table, in one implicit transaction,
// so that a database pair can serve the next scenario. Sequences go on: no
// check shows an id, only the order of rows.
const ResetProducer = `DELETE FROM ledger_entries; DELETE FROM journal; DELETE FROM outbox; DELETE FROM accounts; DELETE FROM aggregates`

// ResetConsumer empties every consumer table.
const ResetConsumer = `DELETE FROM inbox; DELETE FROM projection; DELETE FROM aggregate_versions; DELETE FROM held`
