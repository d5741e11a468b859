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
		strikes := r.strikes(l.svc)
		struck := struckAt(l.proxy)
		pubs, dels, acks := l.proxy.History()
		for _, p := range pubs {
			pass := passOf(strikes, p.At)
			if struck[p.At] && pass > 0 {
				// The XADD whose reply the fault held: a reply trigger
				// strikes (is taken) as the command goes out, before
				// Redis answers, yet the publish is the struck pass's.
				pass--
			}
			step := 1<<20 + l.start<<10 + pass
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

// strikes are the times the faults armed for s struck, sorted.
func (r *Run) strikes(s *service) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, a := range r.faults {
		if at := a.a.StruckAt(); a.svc == s && !at.IsZero() {
			out = append(out, at)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// struckAt are the times of the commands a fault struck at, as recorded.
func struckAt(p *resp.Proxy) map[time.Time]bool {
	out := map[time.Time]bool{}
	for _, e := range p.Events() {
		if e.Fault != "" {
			out[e.At] = true
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
