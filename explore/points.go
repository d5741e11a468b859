package explore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/sysrun"
)

// Point is one fault to try: a service's start step, a boundary named as a
// trigger, its nth crossing, an action.
type Point struct {
	ID       int
	Service  string
	Step     int           // the workload's start step
	On       fault.Trigger // where: consumer_db.commit(table=inbox), broker.request(XADD) (its Nth and Action are the point's own)
	Nth      int
	Do       string
	Crossing string // the kind of crossing it strikes, as the map names it
	// Pruned says why the point is not run ("" when it is): a duplicate
	// by the reduction, past the nth cap, the budget.
	Pruned string
	// Second is depth 2's fault during the recovery from this one: on the
	// restarted process (Where "then") or later on the same one ("also").
	Second *Fault
	// Listed: never run, its outcome known before (an unclassifiable
	// boundary: unclassifiedPoints).
	Listed bool
	// Shard is the shard that runs it (Partition), 0 when none does.
	Shard int
	Verdict
}

// Faults are the point's schedule.
func (p *Point) Faults() []Fault {
	fs := []Fault{{Step: p.Step, On: p.On, Nth: p.Nth, Do: p.Do}}
	if p.Second != nil {
		fs = append(fs, *p.Second)
	}
	return fs
}

func (p *Point) String() string {
	s := fmt.Sprintf("%s %s nth=%d do=%s", p.Service, p.where(), p.Nth, p.Do)
	if p.Second != nil {
		s += fmt.Sprintf(" + %s: %s nth=%d do=%s", p.Second.Where, p.Second.On.On(), p.Second.Nth, p.Second.Do)
	}
	return s
}

// where is the point's trigger as reports name it; a listed point's is
// its link and boundary alone (consumer_db.commit): no trigger there can
// be struck exactly.
func (p *Point) where() string {
	if p.Listed {
		return p.On.Link.String() + "." + p.On.Boundary.String()
	}
	return p.On.On()
}

// Enumerate lists the points of a fault-free run's crossings.
//
// Each crossing of a start step's own process is a candidate, named by a
// trigger that strikes it: a database crossing by one of the tables it
// wrote (the one it is the lowest nth of; the inbox or outbox table on a
// tie), a broker operation by request(OP) and reply(OP) where each can
// strike it, each with its own nth (fault.Crossing's Request, Response:
// a Kafka Fetch is counted by request(deliver) always, by reply(deliver)
// only when it handed out records). Pruned, as
// Filibuster's dynamic reduction prunes: a crossing of the same kind as an
// earlier one of the process after the same set of kinds of crossings (same
// boundary, same recorded prefix: the fault would meet the same state); an
// idle poll (a read that handed out nothing) after the process's first,
// since a fault there meets no work in flight; a kind past nthCap points; reply(OP) with
// error where request(OP) strikes the same crossing, which the proxy
// applies as request(OP) does (the command is not sent) — but for deliver,
// whose reply error keeps a delivery from the service. Crossings with a skip reason (boundary map) get no point.
func Enumerate(w *Workload, xs []fault.Crossing, actions []string, nthCap int) []*Point {
	var out []*Point
	procs := processes(w, xs)
	for _, i := range w.Starts {
		e := newEnumerator(w, i, actions, nthCap)
		for _, c := range procs[i] {
			out = append(out, e.points(c)...)
		}
	}
	for i, p := range out {
		p.ID = i + 1
	}
	return out
}

// unclassifiedPoints are the boundaries the proxy could not attribute (a
// COMMIT inside a multi-statement query, whose writes it did not learn),
// one per service and boundary: listed as unclassifiable with the proxy's
// reason, never run — a fault there could not be struck exactly. They come
// from the observer's reasons (Run.Unclassified; the observer gave up, so
// such a link may show no crossing at all) and from crossings marked
// unattributed. Their ids follow the n points enumerated.
func unclassifiedPoints(w *Workload, xs []fault.Crossing, why []sysrun.Unclassified, n int) []*Point {
	var out []*Point
	seen := map[string]bool{}
	add := func(step int, on fault.Trigger, crossing, reason string) {
		p := &Point{Service: w.Service(step), Step: step, On: on, Nth: 1, Do: "-", Crossing: crossing, Listed: true,
			Verdict: Verdict{Outcome: Unclassed, Why: reason}}
		if key := p.Service + " " + p.where(); !seen[key] {
			seen[key] = true
			n++
			p.ID = n
			out = append(out, p)
		}
	}
	for _, u := range why {
		for _, i := range w.Starts {
			if w.Service(i) == u.Service {
				on := fault.Trigger{Link: u.Link, Boundary: u.Boundary}
				add(i, on, on.Link.String()+"."+on.Boundary.String()+"(?)", u.Reason)
				break
			}
		}
	}
	procs := processes(w, xs)
	for _, i := range w.Starts {
		for _, c := range procs[i] {
			if c.Unattributed {
				add(i, c.DatabaseTrigger(""), c.Label(), "the proxy did not learn what this transaction wrote")
			}
		}
	}
	return out
}

func newEnumerator(w *Workload, step int, actions []string, nthCap int) *enumerator {
	return &enumerator{w: w, step: step, actions: actions, nthCap: nthCap, dialects: dialects(),
		count: map[string]int{}, kinds: map[string]bool{}, seen: map[string]string{}, kept: map[string]int{}}
}

// dialects are the brokers' proxy dialects a point's trigger is loaded
// with, as a scenario's fault is.
func dialects() []fault.Dialect { return broker.Dialects(broker.Kinds()) }

// enumerator walks one process's crossings in order. Its maps are keyed
// by a trigger's text (On).
type enumerator struct {
	w        *Workload
	step     int
	actions  []string
	nthCap   int
	dialects []fault.Dialect
	count    map[string]int    // trigger → crossings so far (its nth)
	kinds    map[string]bool   // the kinds crossed so far: the prefix
	seen     map[string]string // kind + prefix → the trigger and nth that stood for it
	kept     map[string]int    // trigger → crossings given points
	idle     string            // the idle poll that stands for all: a fault there meets no work
}

func (e *enumerator) points(c fault.Crossing) []*Point {
	kind := c.Label()
	prefix := strings.Join(sortedKeys(e.kinds), "|")
	e.kinds[kind] = true
	ts := e.trigger(c)
	if skipOf(c) != "" || len(ts) == 0 {
		return nil
	}
	on, nth := ts[0].on.On(), ts[0].nth
	why := ""
	key := kind + "#" + prefix
	switch first, dup := e.seen[key]; {
	case dup:
		why = "duplicate of " + first + " (same boundary, same recorded prefix)"
	case idle(c) && e.idle != "":
		why = "an idle poll like " + e.idle
	case e.kept[on] >= e.nthCap:
		why = fmt.Sprintf("past the nth cap (%d per boundary)", e.nthCap)
	}
	here := fmt.Sprintf("%s nth=%d", on, nth)
	if why == "" {
		e.seen[key] = here
		e.kept[on]++
		if idle(c) {
			e.idle = here
		}
	}
	var out []*Point
	for _, t := range ts {
		_, unarmable := fault.New(t.on, e.dialects)
		for _, do := range e.actions {
			p := &Point{Service: e.w.Service(e.step), Step: e.step, On: t.on, Nth: t.nth, Do: do, Crossing: kind, Pruned: why}
			if p.Pruned == "" {
				p.Pruned = sameAsRequest(t.on, do, c)
			}
			if unarmable != nil && p.Pruned == "" {
				p.Pruned = "cannot be armed: " + unarmable.Error()
			}
			out = append(out, p)
		}
	}
	return out
}

// sameAsRequest says why action do at reply(OP) is request(OP)'s own
// point ("" when it is not): an error where request(OP) strikes the same
// crossing, which the proxy applies as request(OP) does (the command is
// not sent) — but for deliver, whose reply error keeps a delivery from
// the service; a duplicate of a publish, sent twice either way.
func sameAsRequest(on fault.Trigger, do string, c fault.Crossing) string {
	if on.Link != fault.Broker || on.Boundary != fault.Reply || c.Request != fault.Strikes {
		return ""
	}
	switch {
	case do == "error" && c.Op != fault.OpDeliver:
		return "the same as request error: the proxy does not send the command either way"
	case do == "duplicate" && publishes[c.Op]:
		return "the same as request duplicate: the proxy sends the publish twice either way"
	}
	return ""
}

// publishes are the operations a duplicate sends twice at either
// boundary alike (each proxy's duplicate.go).
var publishes = map[string]bool{"XADD": true, "publish": true, "Produce": true}

// struck is a trigger that strikes a crossing, and the crossing's nth
// among those it counts.
type struck struct {
	on  fault.Trigger
	nth int
}

// trigger names the crossing: the triggers that strike it, each with its
// nth. Every trigger that counts it moves its count, whichever names it: a
// database crossing's tables (named by the one it is the lowest nth of), a
// broker operation's request(OP) and reply(OP), each counted as the proxy
// counts it (fault.Meet) and named only where it can strike.
func (e *enumerator) trigger(c fault.Crossing) []struck {
	if c.Link == fault.Broker {
		var out []struck
		for _, b := range []fault.Boundary{fault.Request, fault.Reply} {
			t := c.Trigger(b)
			if !t.Meets(c) {
				continue
			}
			e.count[t.On()]++
			if c.Meet(b) == fault.Strikes {
				out = append(out, struck{t, e.count[t.On()]})
			}
		}
		return out
	}
	if len(c.Tables) == 0 {
		return nil
	}
	var best fault.Trigger
	bestN := 0
	for _, table := range c.Tables {
		t := c.DatabaseTrigger(table)
		e.count[t.On()]++
		n := e.count[t.On()]
		if bestN == 0 || n < bestN || n == bestN && e.mapped(table) && !e.mapped(best.Filter.Table) {
			best, bestN = t, n
		}
	}
	return []struck{{best, bestN}}
}

// mapped: the system file's inbox or outbox table.
func (e *enumerator) mapped(table string) bool {
	s := e.w.System
	return strings.EqualFold(table, s.Inbox.Table) || strings.EqualFold(table, s.Outbox.Table)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// inapplicable says why action do cannot strike the trigger on on broker
// b ("" when it can, or when the point is pruned for another reason): a
// duplicate or a drop strikes a broker boundary only, where b's proxy
// applies it exactly (its dialect compiles it: a publish, a delivery, a
// reply).
func inapplicable(on fault.Trigger, do, b string) string {
	a, err := fault.ParseAction(do)
	if err != nil || !a.Do.Neutral() {
		return ""
	}
	ds := dialects()
	if _, err := fault.New(on, ds); err != nil {
		return "" // pruned as cannot be armed
	}
	// "ACTION not applied here (why)": the progress line counts them by
	// what comes before the parenthesis.
	if on.Link != fault.Broker {
		return do + " not applied here (a database boundary: it strikes a broker's)"
	}
	on.Action = a
	for _, d := range ds {
		if c := fault.Compile(on, d, ds); d.Broker == b && c.Skip != nil {
			return fmt.Sprintf("%s not applied here (%s: %v)", do, b, c.Skip)
		}
	}
	return ""
}

// PruneInapplicable prunes the points (and depth 2's pairs) whose action,
// first or second, does not apply at their trigger on broker b: the
// default actions hold duplicate and drop, which most crossings do not
// take.
func PruneInapplicable(ps []*Point, b string) {
	for _, p := range ps {
		if p.Pruned != "" || p.Listed {
			continue
		}
		p.Pruned = inapplicable(p.On, p.Do, b)
		if p.Pruned == "" && p.Second != nil {
			p.Pruned = inapplicable(p.Second.On, p.Second.Do, b)
		}
	}
}

// applicable is do, or where it does not apply at on on broker b the
// next action of the list that does; false when none does.
func applicable(on fault.Trigger, do string, actions []string, b string) (string, bool) {
	i := slices.Index(actions, do)
	for k := range actions {
		if a := actions[(i+k)%len(actions)]; inapplicable(on, a, b) == "" {
			return a, true
		}
	}
	return "", false
}
