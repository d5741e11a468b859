package explore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/system"
)

// Point is one fault to try: a service's start step, a boundary named as a
// trigger, its nth crossing, an action.
type Point struct {
	ID       int
	Service  string
	Step     int    // the workload's start step
	On       string // the trigger: consumer_db.commit(table=inbox), broker.request(XADD)
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
	s := fmt.Sprintf("%s %s nth=%d do=%s", p.Service, p.On, p.Nth, p.Do)
	if p.Second != nil {
		s += fmt.Sprintf(" + %s: %s nth=%d do=%s", p.Second.Where, p.Second.On, p.Second.Nth, p.Second.Do)
	}
	return s
}

// Enumerate lists the points of a fault-free run's crossings.
//
// Each crossing of a start step's own process is a candidate, named by a
// trigger that strikes it: a database crossing by one of the tables it
// wrote (the one it is the lowest nth of; the inbox or outbox table on a
// tie), a broker operation by request(OP) and reply(OP) where each can
// strike it, each with its own nth (sysrun.Crossing's AtRequest, AtReply:
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
func Enumerate(w *Workload, xs []sysrun.Crossing, actions []string, nthCap int) []*Point {
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
// from the observer's reasons (Run.Unclassified: "SERVICE LINK.BOUNDARY:
// why"; the observer gave up, so such a link may show no crossing at all)
// and from crossings marked unattributed. Their ids follow the n points
// enumerated.
func unclassifiedPoints(w *Workload, xs []sysrun.Crossing, why []string, n int) []*Point {
	var out []*Point
	seen := map[string]bool{}
	add := func(step int, on, crossing, reason string) {
		if key := w.Service(step) + " " + on; !seen[key] {
			seen[key] = true
			n++
			out = append(out, &Point{ID: n, Service: w.Service(step), Step: step, On: on, Nth: 1, Do: "-", Crossing: crossing, Listed: true,
				Verdict: Verdict{Outcome: Unclassed, Why: reason}})
		}
	}
	for _, u := range why {
		head, reason, ok := strings.Cut(u, ": ")
		svc, on, ok2 := strings.Cut(head, " ")
		if !ok || !ok2 {
			continue
		}
		for _, i := range w.Starts {
			if w.Service(i) == svc {
				add(i, on, on+"(?)", reason)
				break
			}
		}
	}
	procs := processes(w, xs)
	for _, i := range w.Starts {
		for _, c := range procs[i] {
			if c.Unattributed {
				add(i, c.Link+"."+c.Boundary, label(c), "the proxy did not learn what this transaction wrote")
			}
		}
	}
	return out
}

func newEnumerator(w *Workload, step int, actions []string, nthCap int) *enumerator {
	return &enumerator{w: w, step: step, actions: actions, nthCap: nthCap,
		count: map[string]int{}, kinds: map[string]bool{}, seen: map[string]string{}, kept: map[string]int{}}
}

// enumerator walks one process's crossings in order.
type enumerator struct {
	w       *Workload
	step    int
	actions []string
	nthCap  int
	count   map[string]int    // trigger → crossings so far (its nth)
	kinds   map[string]bool   // the kinds crossed so far: the prefix
	seen    map[string]string // kind + prefix → the trigger and nth that stood for it
	kept    map[string]int    // trigger → crossings given points
	idle    string            // the idle poll that stands for all: a fault there meets no work
}

func (e *enumerator) points(c sysrun.Crossing) []*Point {
	kind := label(c)
	prefix := strings.Join(sortedKeys(e.kinds), "|")
	e.kinds[kind] = true
	ts := e.trigger(c)
	if skipOf(c) != "" || len(ts) == 0 {
		return nil
	}
	on, nth := ts[0].on, ts[0].nth
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
		for _, do := range e.actions {
			p := &Point{Service: e.w.Service(e.step), Step: e.step, On: t.on, Nth: t.nth, Do: do, Crossing: kind, Pruned: why}
			if p.Pruned == "" && strings.HasPrefix(t.on, "broker.reply(") && do == "error" && c.AtRequest == broker.Strikes && c.Command != "deliver" {
				p.Pruned = "the same as request error: the proxy does not send the command either way"
			}
			if p.Pruned == "" && strings.HasPrefix(t.on, "broker.reply(") && do == "duplicate" && c.AtRequest == broker.Strikes && publishes[c.Command] {
				p.Pruned = "the same as request duplicate: the proxy sends the publish twice either way"
			}
			if _, err := system.ParseTrigger(t.on); err != nil && p.Pruned == "" {
				p.Pruned = "cannot be armed: " + err.Error()
			}
			out = append(out, p)
		}
	}
	return out
}

// publishes are the operations a duplicate sends twice at either
// boundary alike (each proxy's duplicate.go).
var publishes = map[string]bool{"XADD": true, "publish": true, "Produce": true}

// struck is a trigger that strikes a crossing, and the crossing's nth
// among those it counts.
type struck struct {
	on  string
	nth int
}

// trigger names the crossing: the triggers that strike it, each with its
// nth. Every trigger that counts it moves its count, whichever names it: a
// database crossing's tables (named by the one it is the lowest nth of), a
// broker operation's request(OP) and reply(OP), each counted as the proxy
// counts it (broker.Meet) and named only where it can strike.
func (e *enumerator) trigger(c sysrun.Crossing) []struck {
	if c.Link == "broker" {
		var out []struck
		for _, b := range []struct {
			on   string
			meet broker.Meet
		}{{"broker.request(" + c.Command + ")", c.AtRequest}, {"broker.reply(" + c.Command + ")", c.AtReply}} {
			if b.meet == broker.Passed {
				continue
			}
			e.count[b.on]++
			if b.meet == broker.Strikes {
				out = append(out, struck{b.on, e.count[b.on]})
			}
		}
		return out
	}
	if len(c.Tables) == 0 {
		return nil
	}
	best, bestN := "", 0
	for _, t := range c.Tables {
		k := fmt.Sprintf("%s.%s(table=%s)", c.Link, c.Boundary, t)
		e.count[k]++
		n := e.count[k]
		if best == "" || n < bestN || n == bestN && e.mapped(t) && !e.mapped(tableOf(best)) {
			best, bestN = k, n
		}
	}
	return []struck{{best, bestN}}
}

// mapped: the system file's inbox or outbox table.
func (e *enumerator) mapped(table string) bool {
	s := e.w.System
	return strings.EqualFold(table, s.Inbox.Table) || strings.EqualFold(table, s.Outbox.Table)
}

func tableOf(trigger string) string {
	_, t, _ := strings.Cut(trigger, "(table=")
	return strings.TrimSuffix(t, ")")
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
// applies it exactly (its Check: a publish, a delivery, a reply).
func inapplicable(on, do, b string) string {
	a, err := system.ParseAction(do)
	if err != nil || !a.Do.Neutral() {
		return ""
	}
	t, err := system.ParseTrigger(on)
	if err != nil {
		return "" // pruned as cannot be armed
	}
	// "ACTION not applied here (why)": the progress line counts them by
	// what comes before the parenthesis.
	if t.Link != fault.Broker {
		return do + " not applied here (a database boundary: it strikes a broker's)"
	}
	t.Action = a
	if err := system.CheckOn(t, b); err != nil {
		return fmt.Sprintf("%s not applied here (%s: %v)", do, b, err)
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
// first of actions after it that does: a random schedule draws its
// actions among all, and keeps its seed's order.
func applicable(on, do string, actions []string, b string) (string, bool) {
	i := slices.Index(actions, do)
	for k := range actions {
		if a := actions[(i+k)%len(actions)]; inapplicable(on, a, b) == "" {
			return a, true
		}
	}
	return "", false
}
