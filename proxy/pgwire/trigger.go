package pgwire

import "github.com/outboxdrill/runner/proxy/fault"

// InjectedSQLState is the SQLSTATE the client sees for an injected error:
// serialization_failure, which a COMMIT really can return and which
// well-behaved clients retry.
const InjectedSQLState = "40001"

// A trigger on a database link (fault.ProducerDB, fault.ConsumerDB) strikes
// at the Nth crossing of its boundary, fault.Commit or fault.Statement, by
// a transaction (or batch) that wrote its Filter.Table. Error makes the
// server really roll the transaction back and the client get an
// ErrorResponse with InjectedSQLState. Which writes a trigger's table
// filter matches is the grammar's to say (fault.Trigger.Wrote): the
// system file's catalog check reads it the same way.

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger fault.Trigger
}
