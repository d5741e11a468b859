package runner

import (
	"fmt"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"
)

// usesCDC reports whether a step of sc reads or acts on the replication
// slot of the CDC relay.
func usesCDC(sc *scenario.Scenario) bool {
	_, ok := cdcStep(sc)
	return ok
}

// cdcStep is the position of the first step that needs the CDC relay.
func cdcStep(sc *scenario.Scenario) (diag.Pos, bool) {
	for _, c := range sc.Steps {
		if c.UsesCDC() {
			return c.Pos, true
		}
	}
	return diag.Pos{}, false
}

// walLevelDoc is where PostgreSQL documents the setting a slot needs.
const walLevelDoc = "https://www.postgresql.org/docs/15/runtime-config-wal.html#GUC-WAL-LEVEL"

// slotSkip is why scenario sc's CDC relay can have no slot on its
// producer's server, whose wal_level was read when the world opened (at
// sc's first step that needs the relay), or "".
func slotSkip(w *world.World, sc *scenario.Scenario) (diag.Pos, string) {
	at, ok := cdcStep(sc)
	if level := w.WalLevel(sc); ok && level != "logical" {
		return at, fmt.Sprintf("the CDC relay needs wal_level=logical on the producer's PostgreSQL, which runs with wal_level=%s (%s); the runner's own server runs with logical", level, walLevelDoc)
	}
	return diag.Pos{}, ""
}
