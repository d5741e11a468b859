package report

import (
	"testing"
	"time"

	"github.com/outboxdrill/runner/history"
)

// A witness op is matched to the wire operation of its own process and
// time: a redelivery of the same event to the same process, or the same
// service's restarted process, carries the event too.
func TestWireOpOfIsTheWitnessOwnOperation(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ev := []WireEvent{{EventID: "e1"}}
	w := &Wire{
		Processes: []Process{{N: 1, Service: "consumer"}, {N: 2, Service: "consumer"}},
		Ops: []WireOp{
			{At: t0, Process: 1, Class: ClassDeliver, Op: "XREADGROUP", Events: ev},
			{At: t0.Add(time.Second), Process: 1, Class: ClassDeliver, Op: "XCLAIM", Events: ev},
			{At: t0.Add(2 * time.Second), Process: 2, Class: ClassDeliver, Op: "XAUTOCLAIM", Events: ev},
		},
	}
	for _, c := range []struct {
		op   history.Op
		want string
	}{
		{history.Op{Kind: history.Delivered, EventID: "e1", At: t0.Add(time.Second), Proc: history.Proc{N: 1}}, "XCLAIM"},
		{history.Op{Kind: history.Delivered, EventID: "e1", At: t0, Proc: history.Proc{N: 1}}, "XREADGROUP"},
		{history.Op{Kind: history.Delivered, EventID: "e1", At: t0, Proc: history.Proc{N: 2}}, "XAUTOCLAIM"},
		// No process or time known: the first that carried it.
		{history.Op{Kind: history.Delivered, EventID: "e1"}, "XREADGROUP"},
	} {
		wo, p, ok := wireOpOf(w, c.op)
		if !ok || wo.Op != c.want || (c.op.Proc.N != 0 && p.N != c.op.Proc.N) {
			t.Errorf("op of process %d at %v: got %s of process %d (ok %v), want %s", c.op.Proc.N, c.op.At, wo.Op, p.N, ok, c.want)
		}
	}
}
