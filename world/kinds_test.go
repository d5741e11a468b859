package world

// The broker kinds, registered as in cmd/runner's (which imports
// broker/kinds): the tests open worlds on them, probe their servers and
// clean them.
import _ "github.com/outboxdrill/runner/broker/kinds"
