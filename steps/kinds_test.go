package steps

import "github.com/outboxdrill/runner/broker/kinds"

// testBrokers are the per-broker override keys the tests compile
// expectations with: the runner's brokers, as the scenario loader passes
// them. Linking broker/kinds also fills the registry that a fault's check
// and the n/a reasons read.
var testBrokers = func() []string {
	var out []string
	for _, k := range kinds.All() {
		out = append(out, k.Name)
	}
	return out
}()
