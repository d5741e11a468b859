// Package pipeline is the reference outbox → broker → inbox pipeline: a
// producer, a relay and a consumer, each with explicit fault points. It knows
// nothing of scenarios or YAML.
package pipeline

import (
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transfer is one business fact: Amount atomic units of Currency moved from
// one account to another, announced by the event EventID.
type Transfer struct {
	EventID  string `json:"event_id"`
	From     string `json:"from"`
	To       string `json:"to"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Aggregate, when set, orders the events of one entity; Version is the
	// event's place in that order, given by the producer (1, 2, …).
	Aggregate string `json:"aggregate,omitempty"`
	Version   int64  `json:"version,omitempty"`
}

// Payload is the event's JSON. It depends on the transfer's values only (no
// database ids, no clock), so a raw publish of the same values is a true
// duplicate and another amount is an identity conflict.
func (t Transfer) Payload() string {
	b, _ := json.Marshal(t) // cannot fail: strings and an int
	return string(b)
}

// Fault names an injected failure.
type Fault string

const (
	// NoFault runs the step as designed.
	NoFault Fault = ""
	// DivZero executes SELECT 1/0 inside the step's transaction: a real
	// SQLSTATE 22012 and a real rollback.
	DivZero Fault = "divzero"
)

// sqlDivZero is the statement that injects DivZero.
const sqlDivZero = "SELECT 1/0"

// IsDivZero reports whether err is PostgreSQL's division_by_zero.
func IsDivZero(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// isDataError reports whether err is PostgreSQL rejecting the data itself
// (class 22 data exception, class 23 integrity violation): a poison message,
// not a broken connection.
func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")
}
