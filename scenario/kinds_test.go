package scenario

import "github.com/outboxdrill/runner/broker/kinds"

// testKinds are the brokers the tests load scenarios against, as
// cmd/runner passes them; linking broker/kinds also fills the registry
// that the reference, the schema and a fault's check read.
var testKinds = kinds.All()
