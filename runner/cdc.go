package runner

import (
	"context"
	"fmt"

	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
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

// openSlot creates the scenario's logical replication slot on its producer
// database, before any step ran (as a connector is set up before the
// application writes), named after the database. On a server whose
// wal_level is not logical it returns the skip reason instead.
func openSlot(ctx context.Context, env *steps.Env, producerDB string) (skip string, err error) {
	level, err := cdc.WalLevel(ctx, env.Producer)
	if err != nil {
		return "", err
	}
	if level != "logical" {
		return fmt.Sprintf("the CDC relay needs wal_level=logical on the producer's PostgreSQL, which runs with wal_level=%s (%s); the runner's own server runs with logical", level, walLevelDoc), nil
	}
	slot := &cdc.Slot{Name: producerDB, DB: env.Producer}
	if err := slot.Drop(ctx); err != nil { // a slot of a killed run on this pair's name
		return "", err
	}
	if err := slot.Create(ctx); err != nil {
		return "", err
	}
	env.CDC = slot
	return "", nil
}
