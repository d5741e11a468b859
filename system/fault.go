package system

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/diag"
)

// Trigger is where a fault strikes on a service's connections: at the
// Nth time the boundary is crossed on Link.
type Trigger struct {
	Link     string // producer_db, consumer_db or broker
	Boundary string // commit or statement (databases); request or reply (broker)
	// Filter narrows the boundary: the table a database transaction or
	// statement wrote ("" = any), the broker command (always given).
	Filter string
}

func (t Trigger) String() string {
	if t.Link == "broker" {
		return fmt.Sprintf("%s.%s(%s)", t.Link, t.Boundary, t.Filter)
	}
	if t.Filter == "" {
		return fmt.Sprintf("%s.%s()", t.Link, t.Boundary)
	}
	return fmt.Sprintf("%s.%s(table=%s)", t.Link, t.Boundary, t.Filter)
}

// Boundaries are the boundaries of each kind of link.
var Boundaries = map[string][]string{
	"producer_db": {"commit", "statement"},
	"consumer_db": {"commit", "statement"},
	"broker":      {"reply", "request"},
}

// Actions are what a fault does at its boundary.
var Actions = []string{"cut", "delay(DURATION)", "error", "kill"}

var (
	triggerShape = regexp.MustCompile(`^([a-z_]+)\.([a-z_]+)\(([^()]*)\)$`)
	command      = regexp.MustCompile(`^[A-Za-z][A-Za-z_-]*(\.[A-Za-z][A-Za-z_-]*)?$`)
)

// ParseTrigger reads "<link>.<boundary>(<filter>)", e.g.
// "consumer_db.commit(table=inbox)" or "broker.reply(XADD)".
func ParseTrigger(on string) (Trigger, error) {
	m := triggerShape.FindStringSubmatch(strings.TrimSpace(on))
	if m == nil {
		return Trigger{}, fmt.Errorf("want <link>.<boundary>(<filter>), e.g. consumer_db.commit(table=inbox) or broker.reply(XADD); got %q", on)
	}
	t := Trigger{Link: m[1], Boundary: m[2]}
	bounds, ok := Boundaries[t.Link]
	if !ok {
		return Trigger{}, fmt.Errorf("unknown link %q%s; links: %s", t.Link, diag.Suggest(t.Link, Links), strings.Join(Links, ", "))
	}
	if !slices.Contains(bounds, t.Boundary) {
		return Trigger{}, fmt.Errorf("%s has no boundary %q%s; it has: %s", t.Link, t.Boundary, diag.Suggest(t.Boundary, bounds), strings.Join(bounds, ", "))
	}
	filter := strings.TrimSpace(m[3])
	if t.Link == "broker" {
		if !command.MatchString(filter) {
			return Trigger{}, fmt.Errorf("%s.%s needs the command it waits for, e.g. %s.%s(XADD); got %q", t.Link, t.Boundary, t.Link, t.Boundary, filter)
		}
		t.Filter = strings.ToUpper(filter)
		if err := knownCommand(t.Filter); err != nil {
			return Trigger{}, fmt.Errorf("%s.%s(%s): %w", t.Link, t.Boundary, filter, err)
		}
		return t, nil
	}
	if filter == "" {
		return t, nil
	}
	table, ok := strings.CutPrefix(filter, "table=")
	if !ok || !sqlIdent.MatchString(strings.TrimSpace(table)) {
		return Trigger{}, fmt.Errorf("%s.%s takes (table=NAME) or (); got (%s)", t.Link, t.Boundary, filter)
	}
	t.Filter = strings.TrimSpace(table)
	return t, nil
}

// Action is what a fault does: kill (SIGKILL the service while the reply is
// held), cut (close the connection), error (the boundary fails for real),
// delay (hold for Delay).
type Action struct {
	Do    string // kill, cut, error or delay
	Delay time.Duration
}

var delayShape = regexp.MustCompile(`^delay\(([^()]*)\)$`)

// ParseAction reads kill, cut, error or delay(250ms).
func ParseAction(do string) (Action, error) {
	do = strings.TrimSpace(do)
	switch do {
	case "kill", "cut", "error":
		return Action{Do: do}, nil
	}
	if m := delayShape.FindStringSubmatch(do); m != nil {
		d, err := time.ParseDuration(strings.TrimSpace(m[1]))
		if err != nil || d <= 0 {
			return Action{}, fmt.Errorf("delay wants a positive duration, e.g. delay(250ms); got %q", m[1])
		}
		return Action{Do: "delay", Delay: d}, nil
	}
	return Action{}, fmt.Errorf("unknown action %q%s; one of: %s", do, diag.Suggest(do, []string{"kill", "cut", "error", "delay"}), strings.Join(Actions, ", "))
}

// Fault is one armed fault as a scenario step gives it.
type Fault struct {
	Trigger Trigger
	Action  Action
	Nth     int
	Text    string // as written: "consumer_db.commit(table=inbox) nth=1 do=kill"
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
