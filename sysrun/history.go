package sysrun

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/proxy/resp"
)

// brokerLog is one service start's broker proxy: what it relayed stays
// readable after the service stopped.
type brokerLog struct {
	service string
	start   int // the run's Nth service start, from 1
	proxy   *resp.Proxy
	svc     *service
}

// Ops is the history the services' broker proxies saw, in wire order: each
// publish, each delivery (its outcome is the consumer's own business:
// history.Delivered) and whether the consumer acked it. The system file's
// stream mapping names the fields.
func (r *Run) Ops() []history.Op {
	r.mu.Lock()
	logs := slices.Clone(r.logs)
	r.mu.Unlock()
	type timed struct {
		at  time.Time
		op  history.Op
		ack *resp.Ack
	}
	var all []timed
	evField, payField := r.cfg.System.Stream.EventID, r.cfg.System.Stream.Payload
	for _, l := range logs {
		where := fmt.Sprintf("%s (service %s, start %d, via its broker proxy)", r.cfg.System.File, l.service, l.start)
		// One service process is one "step" up to a fault that struck it:
		// a duplicate within one pass is a double publish; what it
		// publishes again after a fault is an at-least-once retry.
		dbStrikes, brokerPass := r.strikes(l.svc), brokerPasses(l.proxy)
		pubs, dels, acks := l.proxy.History()
		for _, p := range pubs {
			step := 1<<20 + l.start<<10 + passOf(dbStrikes, p.At) + brokerPass[p.At]
			all = append(all, timed{at: p.At, op: history.Op{Step: where, StepN: step, Kind: history.Publish,
				EventID: p.Fields[evField], EntryID: p.ID, Payload: p.Fields[payField]}})
		}
		for _, d := range dels {
			all = append(all, timed{at: d.At, op: history.Op{Step: where, StepN: 1<<20 + l.start<<10, Kind: history.Delivered,
				EventID: d.Fields[evField], EntryID: d.ID, Consumer: d.Group, Model: d.Group, Payload: d.Fields[payField]}})
		}
		for i := range acks {
			all = append(all, timed{at: acks[i].At, ack: &acks[i]})
		}
	}
	slices.SortStableFunc(all, func(a, b timed) int { return a.at.Compare(b.at) })
	var out []history.Op
	latest := map[[2]string]int{} // group, entry id → its latest delivery in out
	for _, t := range all {
		if t.ack == nil {
			if t.op.Kind == history.Delivered {
				latest[[2]string{t.op.Consumer, t.op.EntryID}] = len(out)
			}
			out = append(out, t.op)
			continue
		}
		// Redis counts what an XACK acknowledged, not which: only a count
		// of all its ids says each one was (never a guess).
		if n, _ := strconv.Atoi(t.ack.Acked); n == len(t.ack.IDs) {
			for _, id := range t.ack.IDs {
				if i, ok := latest[[2]string{t.ack.Group, id}]; ok {
					out[i].Acked = true
				}
			}
		}
	}
	return out
}

// strikes are the times the database faults armed for s struck, sorted
// (the broker's are counted in the proxy's record: brokerPasses).
func (r *Run) strikes(s *service) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, a := range r.faults {
		if at := a.a.StruckAt(); a.svc == s && !at.IsZero() && a.f.Trigger.Link != "broker" {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// brokerPasses are, by the time each command was recorded, how many
// broker faults struck before it, in the order the proxy recorded them:
// a strike's time is taken as its command goes out, but what the client
// pipelined before it is answered (and recorded) after that, and belongs
// to the pass before; the struck command itself too.
func brokerPasses(p *resp.Proxy) map[time.Time]int {
	out := map[time.Time]int{}
	n := 0
	for _, e := range p.Events() {
		out[e.At] = n
		if e.Fault != "" {
			n++
		}
	}
	return out
}

// passOf is how many strikes came before t.
func passOf(strikes []time.Time, t time.Time) int {
	n := 0
	for _, s := range strikes {
		if s.Before(t) {
			n++
		}
	}
	return n
}

// Consumers are the consumer ids (groups) the services read as, sorted.
func (r *Run) Consumers() []string {
	var ids []string
	for _, op := range r.Ops() {
		if op.Kind == history.Delivered && !slices.Contains(ids, op.Consumer) {
			ids = append(ids, op.Consumer)
		}
	}
	slices.Sort(ids)
	return ids
}
