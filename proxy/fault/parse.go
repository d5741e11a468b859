package fault

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
)

// This file is the one reader of a fault's text: Parse turns a scenario's
// {on, nth, do} into a Trigger, and nothing else in the module reads a
// trigger's text (grammar_test.go holds it so). Everything downstream
// passes the Trigger, and prints it with On or String.

// Actions are what a fault does at its boundary, as do: writes them,
// sorted: cut, delay(DURATION), drop, … (from doNames).
func Actions() []string {
	out := ActionNames()
	for i, n := range out {
		if n == Delay.String() {
			out[i] = n + "(DURATION)"
		}
	}
	slices.Sort(out)
	return out
}

var (
	// triggerShape is a trigger's text: <link>.<boundary>(<filter>).
	triggerShape = lazy.Regexp(`^([a-z_]+)\.([a-z_]+)\(([^()]*)\)$`)
	delayShape   = lazy.Regexp(`^delay\(([^()]*)\)$`)
	// sqlIdent is a table name, optionally schema-qualified (the system
	// file's mapping names follow the same rule).
	sqlIdent = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$`)
)

// Spec is a fault as a scenario writes it: fault: {on, nth, do, optional}.
type Spec struct {
	On       string
	Nth      int
	Do       string
	Optional bool
	// Watch reads on: alone, as a service's ready: {on: …} writes it: the
	// trigger counts its crossings and never strikes (Never, at an nth
	// never reached); nth and do are not read.
	Watch bool
}

// Problem is one thing wrong with a fault, about one of its keys (on, nth
// or do): the caller says it at that key's line and column.
type Problem struct {
	Key string
	Err error
}

func (p Problem) Error() string { return p.Key + ": " + p.Err.Error() }
func (p Problem) Unwrap() error { return p.Err }

// UnsuitedError is a broker trigger well formed but taken by none of the
// dialects it was read with as written (an operation none has, a filter
// none applies). Trigger is it as read, so that the caller can say why in
// the words of the brokers that matter once it knows them (a system
// file's brokers:), and Err why in all of theirs.
type UnsuitedError struct {
	Trigger Trigger
	Err     error
}

func (e *UnsuitedError) Error() string { return e.Err.Error() }
func (e *UnsuitedError) Unwrap() error { return e.Err }

// Parse reads a fault: on, "<link>.<boundary>(<filter>)" (e.g.
// consumer_db.commit(table=inbox), broker.reply(XADD),
// broker.reply(publish, topic=orders)), nth and do, into a Trigger. It is
// the only reader of a trigger's text. Every problem is said, each at its
// key: an unknown link or boundary (with the closest), each malformed
// filter, an nth below 1, an unknown action, an action of the broker on a
// database link. A broker operation is judged against ds, the broker
// proxies' dialects (not at all without any): the first that knows it
// spells it (Redis upper-cases a command); one none knows is a Problem
// whose Err is an *UnsuitedError, for the caller to say in the words of
// the brokers that matter.
func Parse(s Spec, ds []Dialect) (Trigger, []Problem) {
	var probs []Problem
	t := Trigger{Nth: s.Nth, Optional: s.Optional}
	on := strings.TrimSpace(s.On)
	if m := triggerShape().FindStringSubmatch(on); m == nil {
		probs = append(probs, Problem{"on", fmt.Errorf("want <link>.<boundary>(<filter>), e.g. consumer_db.commit(table=inbox) or broker.reply(XADD); got %q", s.On)})
	} else {
		var errs []error
		t, errs = readPlace(t, m[1], m[2], strings.TrimSpace(m[3]), ds)
		for _, err := range errs {
			probs = append(probs, Problem{"on", err})
		}
	}
	if s.Watch {
		t.Nth, t.Action = math.MaxInt, Never
		return t, probs
	}
	if s.Nth < 1 {
		probs = append(probs, Problem{"nth", fmt.Errorf("must be at least 1, got %d", s.Nth)})
	}
	a, err := ParseAction(s.Do)
	if err != nil {
		probs = append(probs, Problem{"do", err})
	}
	t.Action = a
	if t.Link.Database() && a.Do.Neutral() {
		// A database's commit has no second copy or lost reply the drill
		// could strike exactly: these are the broker's faults.
		probs = append(probs, Problem{"do", fmt.Errorf("%v applies on a broker boundary (broker.reply(publish), broker.reply(deliver)…), not on %s", a.Do, t.Link)})
	}
	return t, probs
}

// readPlace fills t's link, boundary and filter from their names and the
// filter's text, with every problem they have: a filter is read once its
// link is known, even under a misspelt boundary.
func readPlace(t Trigger, linkName, boundName, filter string, ds []Dialect) (Trigger, []error) {
	link, ok := LinkNamed(linkName)
	if !ok {
		links := LinkNames()
		return t, []error{fmt.Errorf("unknown link %q%s; links: %s", linkName, diag.Suggest(linkName, links), strings.Join(links, ", "))}
	}
	t.Link = link
	var errs []error
	if b, ok := link.Boundary(boundName); ok {
		t.Boundary = b
	} else {
		bounds := link.BoundaryNames()
		errs = append(errs, fmt.Errorf("%s has no boundary %q%s; it has: %s", link, boundName, diag.Suggest(boundName, bounds), strings.Join(bounds, ", ")))
	}
	place := link.String() + "." + boundName
	if link != Broker {
		table, err := tableFilter(place, filter)
		t.Filter.Table = table
		return t, append(errs, err...)
	}
	f, ferrs := brokerFilter(place, filter)
	t.Filter = f
	errs = append(errs, ferrs...)
	if len(errs) == 0 && ds != nil {
		var err error
		if t, err = checkOperation(t, ds); err != nil {
			errs = append(errs, err)
		}
	}
	return t, errs
}

// brokerFilter reads a broker boundary's filter: an operation, then
// key=value filters (publish, topic=orders); each malformed one is said.
func brokerFilter(place, filter string) (Filter, []error) {
	var f Filter
	var errs []error
	parts := strings.Split(filter, ",")
	f.Command = strings.TrimSpace(parts[0])
	if f.Command == "" {
		errs = append(errs, fmt.Errorf("%s needs the command it waits for, e.g. %s(publish) or %s(XADD); got %q", place, place, place, filter))
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || strings.TrimSpace(v) == "" || !f.SetBroker(strings.TrimSpace(k), strings.TrimSpace(v)) {
			names := filterNames()
			errs = append(errs, fmt.Errorf("%s(%s): want NAME=VALUE filters, NAME one of %s; got %q%s", place, filter, strings.Join(names, ", "), strings.TrimSpace(kv), diag.Suggest(strings.TrimSpace(k), names)))
		}
	}
	return f, errs
}

// tableFilter reads a database boundary's filter: (table=NAME) or ().
func tableFilter(place, filter string) (string, []error) {
	if filter == "" {
		return "", nil
	}
	table, ok := strings.CutPrefix(filter, "table=")
	if !ok || checkTable(place, table) != nil {
		hint := ""
		if key, _, found := strings.Cut(filter, "="); found && !ok {
			hint = diag.Suggest(strings.TrimSpace(key), []string{"table"})
		}
		return "", []error{fmt.Errorf("%s takes (table=NAME) or (); got (%s)%s", place, filter, hint)}
	}
	return strings.TrimSpace(table), nil
}

// checkTable says whether table is a table name a filter may hold.
func checkTable(place, table string) error {
	if !sqlIdent().MatchString(strings.TrimSpace(table)) {
		return fmt.Errorf("%s takes (table=NAME) or (); got (table=%s)", place, table)
	}
	return nil
}

// filterNames are the broker filters' names.
func filterNames() []string {
	var out []string
	for _, kv := range (Filter{}).BrokerFilters() {
		out = append(out, kv[0])
	}
	return out
}

// ParseAction reads what a fault does: kill (SIGKILL the service while the
// reply is held), cut (close the connection), error (the boundary fails
// for real), delay(250ms) (hold the reply that long), duplicate (a publish
// or a delivery crosses twice), drop (a reply or a delivery never reaches
// the client; broker boundaries only, where each proxy's dialect says).
func ParseAction(do string) (Action, error) {
	do = strings.TrimSpace(do)
	for _, n := range doNames {
		if do == n.name && n.do != Delay {
			return Action{Do: n.do}, nil
		}
	}
	if m := delayShape().FindStringSubmatch(do); m != nil {
		d, err := time.ParseDuration(strings.TrimSpace(m[1]))
		if err != nil || d <= 0 {
			return Action{}, fmt.Errorf("delay wants a positive duration, e.g. delay(250ms); got %q", m[1])
		}
		return Action{Do: Delay, Delay: d}, nil
	}
	return Action{}, fmt.Errorf("unknown action %q%s; one of: %s", do, diag.Suggest(do, ActionNames()), strings.Join(Actions(), ", "))
}

// NeutralOp reports whether op is one every broker's proxy knows:
// publish, deliver, ack.
func NeutralOp(op string) bool { return slices.Contains([]string{OpPublish, OpDeliver, OpAck}, op) }
