package pgwire

import (
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
)

// InjectedSQLState is the SQLSTATE the client sees for an injected error:
// serialization_failure, which a COMMIT really can return and which
// well-behaved clients retry.
const InjectedSQLState = "40001"

// A trigger on a database link (fault.ProducerDB, fault.ConsumerDB) strikes
// at the Nth crossing of its boundary, fault.Commit or fault.Statement, by
// a transaction (or batch) that wrote its Filter.Table. Error makes the
// server really roll the transaction back and the client get an
// ErrorResponse with InjectedSQLState.

// matches reports whether a set of written tables matches t's table
// filter: by name or schema.name, in any case; no filter matches any
// write (and, for Commit, any commit).
func matches(t fault.Trigger, tables []string) bool {
	want := t.Filter.Table
	if want == "" {
		return t.Boundary == fault.Commit || len(tables) > 0
	}
	for _, tab := range tables {
		if strings.EqualFold(tab, want) || strings.HasSuffix(strings.ToLower(tab), "."+strings.ToLower(want)) {
			return true
		}
	}
	return false
}

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger fault.Trigger
}
