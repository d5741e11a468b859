// Package scenariotest loads scenarios for the tests of packages above
// scenario (testutil cannot: scenario's own tests import it).
package scenariotest

import (
	"slices"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kinds"
	"github.com/outboxdrill/runner/scenario"
)

// Kinds are the brokers a test loads scenarios against, as cmd/runner
// passes them: the built-in ones (broker/kinds, whose link also fills the
// registry the run reads), then any a test registered itself (a fixture).
func Kinds() []*broker.Kind {
	out := kinds.All()
	for _, k := range broker.Kinds() {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// ParseOne loads src as t.yaml, which must hold exactly one valid scenario.
func ParseOne(t testing.TB, src string) *scenario.Scenario {
	t.Helper()
	scs, errs := scenario.Parse("t.yaml", []byte(src), Kinds())
	if len(errs) > 0 || len(scs) != 1 {
		t.Fatalf("unexpected errors:\n%v", errs)
	}
	return scs[0]
}
