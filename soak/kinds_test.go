package soak

// The registry holds the runner's brokers in this test binary as it does
// in cmd/runner's (which imports broker/kinds): the tests open worlds on
// Redis by name.
import _ "github.com/outboxdrill/runner/broker/kinds"
