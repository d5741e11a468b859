package sysrun

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/proxy/pgwire"
)

// Crossing is one boundary a service process crossed, as its proxies saw
// it: a commit or a statement batch that wrote tables (databases), or a
// broker command with the kind of its reply. `runner explore` builds its
// boundary map and its fault points from them.
type Crossing struct {
	Service string
	Start   diag.Pos // the start step that started the process
	// Process is the run's Nth service process (start steps and the
	// supervisor's restarts alike), from 1; Restart is 0 for a start
	// step's own process, k for the supervisor's k-th restart of it.
	Process, Restart int
	Link             string   // producer_db, consumer_db or broker
	Boundary         string   // commit or statement; "command" on the broker (request and reply both)
	Tables           []string // what a commit or statement wrote, bare names, sorted
	// Unattributed: a commit whose tables the proxy did not learn (the
	// observer was given up, see Run.Unclassified).
	Unattributed bool
	// Command is, on the broker, the operation a trigger names to strike
	// it: a Redis command (upper case), publish, deliver, ack, or a native
	// operation (broker.Crossing's Op).
	Command string
	// Reply is the kind of the broker's answer: "empty", "entries",
	// "error", "none" (no reply reached it), "ok", or "" (it answers
	// nothing, or its answer is a crossing of its own).
	Reply string
	// AtRequest and AtReply say how broker.request(Command) and
	// broker.reply(Command) meet the crossing: counted and able to strike
	// it (the zero value, as on Redis), counted only, or passed by.
	AtRequest, AtReply broker.Meet
	Setup              bool   // a connection's setup: no point
	Fault              string // the trigger that struck here, "" for none
	At                 time.Time
}

// Label names the crossing as the boundary map shows it:
// "consumer_db.commit(table=inbox,projection)", "broker.XREADGROUP→empty".
func (c Crossing) Label() string {
	if c.Link == "broker" {
		return BrokerLabel(c)
	}
	if c.Unattributed {
		return c.Link + "." + c.Boundary + "(?)"
	}
	return fmt.Sprintf("%s.%s(table=%s)", c.Link, c.Boundary, strings.Join(c.Tables, ","))
}

// BrokerLabel names a broker crossing by the triggers that strike it:
// "broker.XADD→ok" (request(XADD) and reply(XADD) both), and where only
// one of them can, "broker.request(deliver)" (a NATS pull request),
// "broker.reply(deliver)→entries" (a NATS delivery), "broker.request(ack)"
// (an AMQP basic.ack: the broker answers nothing).
func BrokerLabel(c Crossing) string {
	l := "broker." + c.Command
	switch {
	case c.AtRequest == broker.Strikes && c.AtReply != broker.Strikes:
		l = "broker.request(" + c.Command + ")"
	case c.AtRequest != broker.Strikes && c.AtReply == broker.Strikes:
		l = "broker.reply(" + c.Command + ")"
	}
	if c.Reply != "" {
		l += "→" + c.Reply
	}
	return l
}

// observed is one process's proxies, kept for Crossings after it ended.
type observed struct {
	svc      *service
	process  int
	restart  int
	watchers []watcher // the never-striking triggers that make the proxies learn what each commit wrote
}

type watcher struct {
	link string
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

// never is a trigger's action that never runs: its nth is never reached.
var never = fault.Action{Do: fault.Delay, Delay: time.Nanosecond}

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
				if a, err := p.Arm(fault.Trigger{Link: link, Boundary: b, Nth: math.MaxInt, Action: never}); err == nil {
					o.watchers = append(o.watchers, watcher{link.String(), a})
				}
			}
		}
	}
	r.observed = append(r.observed, o)
}

// Crossings are the boundaries every process of the run crossed so far, in
// the order the proxies saw them.
func (r *Run) Crossings() []Crossing {
	r.mu.Lock()
	obs := slices.Clone(r.observed)
	r.mu.Unlock()
	var out []Crossing
	for _, o := range obs {
		base := Crossing{Service: o.svc.name, Start: o.svc.inst.at, Process: o.process, Restart: o.restart}
		for i, link := range []string{"producer_db", "consumer_db"} {
			out = append(out, dbCrossings(base, link, o.svc.pg[i])...)
		}
		if c, ok := o.svc.broker.(broker.CrossingLog); ok {
			out = append(out, brokerCrossings(base, c)...)
		}
	}
	slices.SortStableFunc(out, func(a, b Crossing) int { return a.At.Compare(b.At) })
	return out
}

func dbCrossings(base Crossing, link string, p *pgwire.Proxy) []Crossing {
	if p == nil {
		return nil
	}
	var out []Crossing
	for _, e := range p.Events() {
		c := base
		c.Link, c.Boundary, c.Fault, c.At = link, e.Boundary.String(), e.Fault, e.At
		c.Unattributed = e.Tables == nil && e.Boundary == fault.Commit
		for _, t := range e.Tables {
			c.Tables = append(c.Tables, t[strings.LastIndexByte(t, '.')+1:])
		}
		slices.Sort(c.Tables)
		out = append(out, c)
	}
	return out
}

func brokerCrossings(base Crossing, p broker.CrossingLog) []Crossing {
	var out []Crossing
	for _, e := range p.Crossings() {
		c := base
		c.Link, c.Boundary, c.Fault, c.At = "broker", "command", e.Fault, e.At
		c.Command, c.Reply, c.AtRequest, c.AtReply, c.Setup = e.Op, e.Reply, e.Request, e.Response, e.Setup
		out = append(out, c)
	}
	return out
}

// Unclassified says, per process and database link, why the proxy gave up
// learning what its commits or statements wrote (a COMMIT inside a
// multi-statement query, TLS, …): the points there cannot be struck
// exactly, and are reported so, never guessed.
func (r *Run) Unclassified() []string {
	r.mu.Lock()
	obs := slices.Clone(r.observed)
	r.mu.Unlock()
	var out []string
	for _, o := range obs {
		for _, w := range o.watchers {
			var u *fault.Unclassifiable
			if errors.As(w.a.Err(), &u) {
				out = append(out, fmt.Sprintf("%s %s.%s: %s", o.svc.name, w.link, w.a.Trigger.Boundary, u.Reason))
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
