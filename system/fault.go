package system

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/fault"
)

// A fault's trigger is one fault.Trigger from here to the proxy that
// strikes it: ParseTrigger and ParseAction read and validate the system
// file's words once; nothing downstream validates them again.

// Actions are what a fault does at its boundary.
var Actions = []string{"cut", "delay(DURATION)", "drop", "duplicate", "error", "kill"}

var (
	triggerShape = regexp.MustCompile(`^([a-z_]+)\.([a-z_]+)\(([^()]*)\)$`)
	command      = regexp.MustCompile(`^[A-Za-z][A-Za-z_-]*(\.[A-Za-z][A-Za-z_-]*)?$`)
)

// ParseTrigger reads "<link>.<boundary>(<filter>)", e.g.
// "consumer_db.commit(table=inbox)" or "broker.reply(XADD)": where the
// fault strikes (its Nth and Action are the caller's).
func ParseTrigger(on string) (fault.Trigger, error) {
	m := triggerShape.FindStringSubmatch(strings.TrimSpace(on))
	if m == nil {
		return fault.Trigger{}, fmt.Errorf("want <link>.<boundary>(<filter>), e.g. consumer_db.commit(table=inbox) or broker.reply(XADD); got %q", on)
	}
	link, ok := fault.LinkNamed(m[1])
	if !ok {
		links := fault.LinkNames()
		return fault.Trigger{}, fmt.Errorf("unknown link %q%s; links: %s", m[1], diag.Suggest(m[1], links), strings.Join(links, ", "))
	}
	b, ok := link.Boundary(m[2])
	if !ok {
		bounds := link.BoundaryNames()
		return fault.Trigger{}, fmt.Errorf("%s has no boundary %q%s; it has: %s", link, m[2], diag.Suggest(m[2], bounds), strings.Join(bounds, ", "))
	}
	t := fault.Trigger{Link: link, Boundary: b}
	filter := strings.TrimSpace(m[3])
	var err error
	if link == fault.Broker {
		err = commandFilter(&t, filter)
	} else {
		t.Filter.Table, err = tableFilter(t, filter)
	}
	if err != nil {
		return fault.Trigger{}, err
	}
	return t, nil
}

// commandFilter reads a broker boundary's filter: an operation, then
// key=value filters (broker.reply(publish, topic=orders)). The operation
// is a neutral one (publish, deliver, ack: every broker), a Redis command
// (upper-cased, CMD or CMD.SUB), or another broker's own as its proxy
// spells it (Produce, basic.ack, +ACK); the trigger must suit at least one
// broker's proxy (on another broker it skips the scenario).
func commandFilter(t *fault.Trigger, filter string) error {
	parts := strings.Split(filter, ",")
	op := strings.TrimSpace(parts[0])
	if op == "" {
		return fmt.Errorf("%s.%s needs the command it waits for, e.g. %s.%s(publish) or %s.%s(XADD); got %q", t.Link, t.Boundary, t.Link, t.Boundary, t.Link, t.Boundary, filter)
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || strings.TrimSpace(v) == "" || !t.Filter.SetBroker(strings.TrimSpace(k), strings.TrimSpace(v)) {
			names := filterNames()
			return fmt.Errorf("%s.%s(%s): want NAME=VALUE filters, NAME one of %s; got %q%s", t.Link, t.Boundary, filter, strings.Join(names, ", "), strings.TrimSpace(kv), diag.Suggest(strings.TrimSpace(k), names))
		}
	}
	cmd, err := operation(op)
	if err != nil {
		t.Filter.Command = op
		return &UnsuitedError{*t, fmt.Errorf("%s.%s(%s): %w", t.Link, t.Boundary, op, err)}
	}
	t.Filter.Command = cmd
	if err := suits(*t); err != nil {
		return &UnsuitedError{*t, err}
	}
	return nil
}

// UnsuitedError is ParseTrigger's error for a trigger well formed but
// taken by no broker's proxy as written (an operation none has, a filter
// none applies). Trigger is it as read, for CheckOn to say why on the
// brokers that matter, in their words.
type UnsuitedError struct {
	Trigger fault.Trigger
	Err     error
}

func (e *UnsuitedError) Error() string { return e.Err.Error() }
func (e *UnsuitedError) Unwrap() error { return e.Err }

// CheckOn says why broker b's proxy does not take t (a broker trigger),
// nil when it does or when b has no proxy (judged when it runs): a Redis
// command Redis lacks, with the closest command; another broker's
// operation it lacks, with the closest of its own.
func CheckOn(t fault.Trigger, b string) error {
	k, ok := broker.Lookup(b)
	if !ok || k.Proxy == nil {
		return nil
	}
	op := t.Filter.Command
	if b == broker.Redis && !slices.Contains(neutralOps, op) {
		err := knownCommand(strings.ToUpper(op))
		if !command.MatchString(op) {
			err = fmt.Errorf("no Redis command %s (want publish, deliver, ack or one such as XADD)", op)
		}
		if err != nil {
			return fmt.Errorf("%w%s", err, othersOp(op, b))
		}
		t.Filter.Command = strings.ToUpper(op)
	}
	err := k.Proxy.Check(t)
	if ops := k.Proxy.Operations(); err != nil && b != broker.Redis && !slices.Contains(ops, op) {
		return fmt.Errorf("%w%s%s", err, diag.Suggest(op, ops), othersOp(op, b))
	}
	return err
}

// othersOp says which other brokers op is an operation of ("; Produce is
// kafka's"), "" when none: a trigger written for another broker.
func othersOp(op, b string) string {
	var of []string
	for _, k := range broker.Kinds() {
		if k.Name == b || k.Proxy == nil {
			continue
		}
		if slices.Contains(k.Proxy.Operations(), op) || k.Name == broker.Redis && command.MatchString(op) && knownCommand(strings.ToUpper(op)) == nil {
			of = append(of, k.Name)
		}
	}
	if len(of) == 0 {
		return ""
	}
	return fmt.Sprintf("; %s is an operation of %s", op, strings.Join(of, ", "))
}

// operation is op as the trigger carries it: neutral, a Redis command
// upper-cased, or another broker's own, exactly.
func operation(op string) (string, error) {
	if slices.Contains(neutralOps, op) || slices.Contains(otherOps(), op) {
		return op, nil
	}
	cmd := strings.ToUpper(op)
	if !command.MatchString(op) {
		return "", fmt.Errorf("no broker operation %s%s; neutral: %s", op, diag.Suggest(op, otherOps()), strings.Join(neutralOps, ", "))
	}
	if err := knownCommand(cmd); err != nil {
		if hint := diag.Suggest(op, otherOps()); hint != "" {
			return "", fmt.Errorf("%w; nor another broker's operation%s", err, hint)
		}
		return "", err
	}
	return cmd, nil
}

// neutralOps are the operations every broker's proxy knows.
var neutralOps = []string{"publish", "deliver", "ack"}

// otherOps are the operations of the brokers' proxies, Redis's aside
// (knownCommand knows those).
func otherOps() []string {
	var out []string
	for _, k := range broker.Kinds() {
		if k.Proxy != nil && k.Name != broker.Redis {
			out = append(out, k.Proxy.Operations()...)
		}
	}
	return out
}

// suits checks the trigger against every broker's proxy: one must take
// it, else each one's reason is the error.
func suits(t fault.Trigger) error {
	var why []string
	for _, k := range broker.Kinds() {
		if k.Proxy == nil {
			continue
		}
		err := k.Proxy.Check(t)
		if err == nil {
			return nil
		}
		why = append(why, fmt.Sprintf("%s: %v", k.Name, err))
	}
	return fmt.Errorf("%s suits no broker's proxy (%s)", t.On(), strings.Join(why, "; "))
}

// filterNames are the broker filters' names.
func filterNames() []string {
	var out []string
	for _, kv := range (fault.Filter{}).BrokerFilters() {
		out = append(out, kv[0])
	}
	return out
}

// tableFilter reads a database boundary's filter: (table=NAME) or ().
func tableFilter(t fault.Trigger, filter string) (string, error) {
	if filter == "" {
		return "", nil
	}
	table, ok := strings.CutPrefix(filter, "table=")
	if !ok || !sqlIdent.MatchString(strings.TrimSpace(table)) {
		hint := ""
		if key, _, found := strings.Cut(filter, "="); found && !ok {
			hint = diag.Suggest(strings.TrimSpace(key), []string{"table"})
		}
		return "", fmt.Errorf("%s.%s takes (table=NAME) or (); got (%s)%s", t.Link, t.Boundary, filter, hint)
	}
	return strings.TrimSpace(table), nil
}

var delayShape = regexp.MustCompile(`^delay\(([^()]*)\)$`)

// ParseAction reads what a fault does: kill (SIGKILL the service while the
// reply is held), cut (close the connection), error (the boundary fails
// for real), delay(250ms) (hold the reply that long), duplicate (a publish
// or a delivery crosses twice), drop (a reply or a delivery never reaches
// the client; broker boundaries only, where each proxy's Check says).
func ParseAction(do string) (fault.Action, error) {
	do = strings.TrimSpace(do)
	switch do {
	case "duplicate":
		return fault.Action{Do: fault.Duplicate}, nil
	case "drop":
		return fault.Action{Do: fault.Drop}, nil
	case "kill":
		return fault.Action{Do: fault.Kill}, nil
	case "cut":
		return fault.Action{Do: fault.Cut}, nil
	case "error":
		return fault.Action{Do: fault.Error}, nil
	}
	if m := delayShape.FindStringSubmatch(do); m != nil {
		d, err := time.ParseDuration(strings.TrimSpace(m[1]))
		if err != nil || d <= 0 {
			return fault.Action{}, fmt.Errorf("delay wants a positive duration, e.g. delay(250ms); got %q", m[1])
		}
		return fault.Action{Do: fault.Delay, Delay: d}, nil
	}
	return fault.Action{}, fmt.Errorf("unknown action %q%s; one of: %s", do, diag.Suggest(do, []string{"kill", "cut", "error", "delay", "duplicate", "drop"}), strings.Join(Actions, ", "))
}

// knownCommand checks a broker filter, CMD or CMD.SUB, against Redis's
// commands: a misspelt one would wait for a command no client sends and
// fail the scenario only at its end, as a fault that never fired.
func knownCommand(filter string) error {
	name, sub, hasSub := strings.Cut(filter, ".")
	subs, ok := redisCommands[name]
	if !ok {
		return fmt.Errorf("no Redis command %s%s", name, diag.Suggest(name, redisCommandNames()))
	}
	if !hasSub {
		return nil
	}
	if len(subs) == 0 {
		return fmt.Errorf("Redis command %s has no subcommands; name it alone: %s", name, name)
	}
	if !slices.Contains(subs, sub) {
		return fmt.Errorf("Redis command %s has no subcommand %s%s; it has: %s", name, sub, diag.Suggest(sub, subs), strings.Join(subs, ", "))
	}
	return nil
}

// redisCommandNames are the Redis commands, sorted, for suggestions.
func redisCommandNames() []string {
	return slices.Sorted(maps.Keys(redisCommands))
}
