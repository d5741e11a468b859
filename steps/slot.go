package steps

import (
	"context"
	"fmt"
)

// SlotParams are the parameters of the slot step.
type SlotParams struct {
	Action string `param:"action" required:"yes" primary:"yes" enum:"drop|create" doc:"drop: pg_drop_replication_slot, what it had not confirmed goes with it; create: a new slot at the current WAL position, blind to everything committed before"`
}

func slotDefs() []*Def {
	return []*Def{
		Define("slot", "Act on the CDC relay's logical replication slot on the producer database (a scenario with relay: {mode: cdc}). Dropping it and creating it again is how a connector is rebuilt: events committed in between are never decoded — lost to the relay, still in the outbox table for reconcile.",
			nil, runSlot),
	}
}

// UsesCDC: the scenario needs its replication slot.
func (*SlotParams) UsesCDC() bool { return true }

func runSlot(ctx context.Context, env *Env, p *SlotParams) (Result, error) {
	if env.CDC == nil {
		return Result{}, fmt.Errorf("slot: this scenario has no replication slot")
	}
	var err error
	if p.Action == "drop" {
		err = env.CDC.Drop(ctx)
	} else {
		err = env.CDC.Create(ctx)
	}
	return Result{Details: []string{fmt.Sprintf("slot %s %s", env.CDC.Name, map[string]string{"drop": "dropped", "create": "created at the current WAL position"}[p.Action])}}, err
}

func (p *SlotParams) Draw(d Diagram, _ Result) {
	d.Note("replication slot "+p.Action, RelayP)
}
