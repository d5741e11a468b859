package system

import "github.com/outboxdrill/runner/broker/kinds"

// testKinds are the brokers the tests read system files against; linking
// broker/kinds also fills the registry that ParseTrigger and the schema
// read, as cmd/runner's does.
var testKinds = kinds.All()
