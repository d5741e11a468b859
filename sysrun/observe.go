package sysrun

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/pgwire"
)

// observed is one process's proxies, kept for Crossings after it ended.
type observed struct {
	svc      *service
	process  int
	restart  int
	watchers []watcher // the never-striking triggers that make the proxies learn what each commit wrote
}

type watcher struct {
	link fault.Link
	a    *pgwire.Armed
}

// Observe makes every process started from now on record what each of its
// commits and statements wrote (for Crossings). It arms, on each database
// proxy, a commit and a statement trigger that never strike: a proxy asks
// the server what a transaction wrote only while a trigger waits.
func (r *Run) Observe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observing = true
}

// watch keeps a started process's proxies for Crossings, arming the
// observers when Observe was called.
func (r *Run) watch(s *service, restart int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := &observed{svc: s, process: len(r.observed) + 1, restart: restart}
	if r.observing {
		for i, p := range s.pg {
			link := []fault.Link{fault.ProducerDB, fault.ConsumerDB}[i]
			for _, b := range link.Boundaries() {
				if a, err := p.Arm(fault.Trigger{Link: link, Boundary: b, Nth: math.MaxInt, Action: fault.Never}); err == nil {
					o.watchers = append(o.watchers, watcher{link, a})
				}
			}
		}
	}
	r.observed = append(r.observed, o)
}

// Crossings are the boundaries every process of the run crossed so far, in
// the order the proxies saw them, each with the service and process.
func (r *Run) Crossings() []fault.Crossing {
	r.mu.Lock()
	obs := slices.Clone(r.observed)
	r.mu.Unlock()
	var out []fault.Crossing
	for _, o := range obs {
		for _, c := range o.svc.crossings() {
			c.Service, c.Start, c.Process, c.Restart = o.svc.name, o.svc.inst.at, o.process, o.restart
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b fault.Crossing) int { return a.At.Compare(b.At) })
	return out
}

// crossings are what the process's proxies saw so far, link by link, each
// in its proxy's order.
func (s *service) crossings() []fault.Crossing {
	var out []fault.Crossing
	for i, link := range []fault.Link{fault.ProducerDB, fault.ConsumerDB} {
		out = append(out, dbCrossings(link, s.pg[i])...)
	}
	if l, ok := s.broker.(broker.CrossingLog); ok {
		out = append(out, l.Crossings()...)
	}
	return out
}

func dbCrossings(link fault.Link, p *pgwire.Proxy) []fault.Crossing {
	if p == nil {
		return nil
	}
	var out []fault.Crossing
	for _, e := range p.Events() {
		c := fault.Crossing{Link: link, Boundary: e.Boundary, Command: e.Command, Fault: e.Fault, At: e.At}
		c.Unattributed = e.Tables == nil && e.Boundary == fault.Commit
		for _, t := range e.Tables {
			c.Tables = append(c.Tables, t[strings.LastIndexByte(t, '.')+1:])
		}
		slices.Sort(c.Tables)
		out = append(out, c)
	}
	return out
}

// Unclassified is a link boundary of a service process whose crossings its
// proxy could not attribute (a COMMIT inside a multi-statement query,
// TLS, …), with why: the points there cannot be struck exactly, and are
// reported so, never guessed.
type Unclassified struct {
	Service  string
	Link     fault.Link
	Boundary fault.Boundary
	Reason   string
}

// String is "SERVICE LINK.BOUNDARY: why", as the boundary map lists it.
func (u Unclassified) String() string {
	return fmt.Sprintf("%s %s.%s: %s", u.Service, u.Link, u.Boundary, u.Reason)
}

// Unclassified says, per process and database link, why the proxy gave up
// learning what its commits or statements wrote.
func (r *Run) Unclassified() []Unclassified {
	r.mu.Lock()
	obs := slices.Clone(r.observed)
	r.mu.Unlock()
	var out []Unclassified
	for _, o := range obs {
		for _, w := range o.watchers {
			var u *fault.Unclassifiable
			if errors.As(w.a.Err(), &u) {
				out = append(out, Unclassified{o.svc.name, w.link, w.a.Trigger.Boundary, u.Reason})
			}
		}
	}
	return out
}

// Dropped is how many events the proxies of every process observed left
// out of their records, full (fault.MaxRecordBytes): the crossings are
// then incomplete.
func (r *Run) Dropped() int64 {
	r.mu.Lock()
	obs := slices.Clone(r.observed)
	r.mu.Unlock()
	var n int64
	for _, o := range obs {
		for _, p := range o.svc.pg {
			if p != nil {
				n += p.Dropped()
			}
		}
		if d, ok := o.svc.broker.(interface{ Dropped() int64 }); ok {
			n += d.Dropped()
		}
	}
	return n
}
