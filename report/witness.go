package report

import (
	"strings"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/safe"
)

// JSONWitness is one operation a violation's witness rests on, as a
// record a program reads (Text is the same line as the console prints).
type JSONWitness struct {
	Text string `json:"text"`
	// Kind is committed, published, purged, pass, delivered or a
	// delivery's outcome (applied, duplicate, conflict, failed, deferred).
	Kind string `json:"kind"`
	// Step is where it happened: a step's file:line:col (and shorthand),
	// or, for what a team's process did on the wire, the system file with
	// the service and its proxy, then the operation.
	Step string `json:"step"`
	// StepIndex is the index of the scenario step it belongs to; absent
	// for an operation of a team's process (no step of the scenario).
	StepIndex *int   `json:"step_index,omitempty"`
	EventID   string `json:"event_id,omitempty"`
	Entry     string `json:"entry,omitempty"`
	Consumer  string `json:"consumer,omitempty"`
	Acked     bool   `json:"acked,omitempty"`
	// DeadLettered: moved to the dead-letter stream; Nacked: given back
	// for redelivery.
	DeadLettered bool `json:"dead_lettered,omitempty"`
	Nacked       bool `json:"nacked,omitempty"`
	// Service, Start and Process name a team's process that did it (the
	// system file's service, the start step that started it, the run's
	// process number, as the timeline's lanes); Wire is the operation it
	// made (XREADGROUP, publish, basic.ack …).
	Service string `json:"service,omitempty"`
	Start   string `json:"start,omitempty"`
	Process int    `json:"process,omitempty"`
	Wire    string `json:"wire,omitempty"`
	// TimeMS is when, in milliseconds since the scenario's first step:
	// the step's start, or the wire operation's instant; absent when not
	// known.
	TimeMS *float64 `json:"time_ms,omitempty"`
}

// witnessRecords are v's witness as records: each op with the step or
// the team's process and wire operation that did it, and when.
func witnessRecords(r *Result, v history.Violation) []JSONWitness {
	start := timelineStart(r)
	var out []JSONWitness
	for _, op := range v.Witness {
		w := JSONWitness{Text: safe.CutLines(op.String()), Kind: op.Kind, Step: safe.Cut(op.Step), EventID: safe.Cut(op.EventID),
			Entry: safe.Cut(op.EntryID), Consumer: safe.Cut(op.Consumer), Acked: op.Acked, DeadLettered: op.DLQ, Nacked: op.Nacked}
		if op.StepN >= 0 && op.StepN < len(r.Steps) {
			n := op.StepN
			w.StepIndex = &n
			if at := r.Steps[n].At; !at.IsZero() && !start.IsZero() {
				w.TimeMS = millis(at.Sub(start).Seconds())
			}
		} else if wo, p, ok := wireOpOf(r.Wire, op); ok {
			w.Service, w.Start, w.Process, w.Wire = safe.Cut(p.Service), safe.Cut(p.Start), p.N, safe.Cut(wo.Op)
			if !start.IsZero() {
				w.TimeMS = millis(wo.At.Sub(start).Seconds())
			}
		}
		out = append(out, w)
	}
	return out
}

func millis(seconds float64) *float64 {
	ms := float64(int64(seconds*1e6)) / 1e3
	return &ms
}

// wireOpOf is the wire operation that carried op (a publish for a
// publish; a delivery, or its ack when it was acked, for a delivery) and
// its process: of op's own process where op names one (its start number,
// else its service), the one nearest op's time where op has one (a
// redelivery to the same process carries the event again), else the first.
func wireOpOf(w *Wire, op history.Op) (WireOp, Process, bool) {
	if w == nil {
		return WireOp{}, Process{}, false
	}
	var best, first *WireOp
	for i := range w.Ops {
		wo := &w.Ops[i]
		if wo.Class == ClassAck || !witnessClass(op, wo.Class) || !carries(wo.Events, op) {
			continue
		}
		if first == nil {
			first = wo
		}
		if !ownProcess(w, wo, op) {
			continue
		}
		if best == nil || !op.At.IsZero() && absDur(wo.At.Sub(op.At)) < absDur(best.At.Sub(op.At)) {
			best = wo
		}
	}
	if best == nil {
		best = first
	}
	if best == nil {
		return WireOp{}, Process{}, false
	}
	p, ok := processOf(w, best.Process)
	return *best, p, ok
}

// ownProcess reports whether wo crossed op's own process: its start
// number where op has one, else the service op's step names.
func ownProcess(w *Wire, wo *WireOp, op history.Op) bool {
	if op.Proc.N != 0 {
		return wo.Process == op.Proc.N
	}
	p, _ := processOf(w, wo.Process)
	return strings.Contains(op.Step, "(service "+p.Service+",")
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func processOf(w *Wire, n int) (Process, bool) {
	for _, p := range w.Processes {
		if p.N == n {
			return p, true
		}
	}
	return Process{}, false
}
