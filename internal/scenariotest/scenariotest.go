// Package scenariotest loads scenarios for the tests of packages above
// scenario (testutil cannot: scenario's own tests import it).
package scenariotest

import (
	"testing"

	"github.com/outboxdrill/runner/scenario"
)

// ParseOne loads src as t.yaml, which must hold exactly one valid scenario.
func ParseOne(t testing.TB, src string) *scenario.Scenario {
	t.Helper()
	scs, errs := scenario.Parse("t.yaml", []byte(src))
	if len(errs) > 0 || len(scs) != 1 {
		t.Fatalf("unexpected errors:\n%v", errs)
	}
	return scs[0]
}
