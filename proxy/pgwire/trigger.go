package pgwire

import (
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/proxy/fault"
)

// Boundary is the protocol event a trigger waits for.
type Boundary int

const (
	// Commit is the reply to a COMMIT of a transaction that wrote the
	// trigger's table (any table when Table is empty).
	Commit Boundary = iota + 1
	// Statement is the reply to a batch of statements (a simple query, or
	// an extended-protocol batch up to its Sync) that wrote the table
	// inside a transaction block.
	Statement
)

func (b Boundary) String() string {
	switch b {
	case Commit:
		return "commit"
	case Statement:
		return "statement"
	}
	return fmt.Sprintf("Boundary(%d)", int(b))
}

// InjectedSQLState is the SQLSTATE the client sees for an injected error:
// serialization_failure, which a COMMIT really can return and which
// well-behaved clients retry.
const InjectedSQLState = "40001"

// Trigger arms one fault: at the Nth crossing of Boundary by a transaction
// (or batch) that wrote Table, take Action. Error makes the server really
// roll the transaction back and the client get an ErrorResponse with
// InjectedSQLState.
type Trigger struct {
	Boundary Boundary
	// Table is the table the transaction or statement wrote, by name or
	// schema.name; "" matches any write (and, for Commit, any commit).
	Table string
	Nth   int // 1 = the first match; 0 counts as 1
	fault.Action
}

func (t Trigger) String() string {
	return fmt.Sprintf("%s(table=%s) nth=%d do=%s", t.Boundary, t.Table, max(t.Nth, 1), t.Action)
}

// matches reports whether a set of written tables matches the trigger's
// table filter.
func (t Trigger) matches(tables []string) bool {
	if t.Table == "" {
		return t.Boundary == Commit || len(tables) > 0
	}
	for _, tab := range tables {
		if strings.EqualFold(tab, t.Table) || strings.HasSuffix(strings.ToLower(tab), "."+strings.ToLower(t.Table)) {
			return true
		}
	}
	return false
}

// Armed is a trigger waiting on a proxy.
type Armed struct {
	*fault.Armed
	Trigger Trigger
}
