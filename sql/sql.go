// Package sql embeds the producer and consumer database schemas, so the
// runner binary carries them and a scenario never depends on the working
// directory.
package sql

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
