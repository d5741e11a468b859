package sysrun

import (
	"maps"
	"slices"

	"github.com/outboxdrill/runner/broker"
)

// ServiceWire is what one service start's broker proxy relayed.
type ServiceWire struct {
	Service string
	Start   int // the run's Nth service start, from 1
	Wire    broker.Wire
}

// Wires are what every service start's broker proxy relayed, read with
// the mapping m rather than the system file's: runner init tries the
// fields a publish carried to learn which one holds its probe's event id.
func (r *Run) Wires(m broker.WireMap) []ServiceWire {
	r.mu.Lock()
	logs := slices.Clone(r.logs)
	r.mu.Unlock()
	out := make([]ServiceWire, 0, len(logs))
	for _, l := range logs {
		out = append(out, ServiceWire{Service: l.service, Start: l.start, Wire: l.proxy.Wire(m)})
	}
	return out
}

// Told are the ${…} values every service of the run is told besides its
// own proxies' addresses: the broker's names for the scenario
// (${destination}, ${group}, …) and ${consumer}.
func (r *Run) Told() map[string]string { return maps.Clone(r.cfg.Vars) }
