package pipeline

import "github.com/outboxdrill/runner/broker"

// Broker is the broker the in-process pipeline runs on where it measures
// against a raw baseline (runner soak --in-process, runner bench): Redis,
// whose baseline is a bare XADD and XREADGROUP. It is the one place outside
// broker/ that names it; the scenarios run on any broker.
const Broker = broker.Redis
