package scaffold

import (
	"fmt"
	"github.com/outboxdrill/runner/proxy/fault"
	"slices"
	"strings"
	"time"
)

// inference is what init learns from the probe's run, step by step: each
// step reads what the ones before found and adds keys to the plan, or
// problems (what init could not infer, each naming what to add).
type inference struct {
	f        *found
	obs      *observation
	plan     *Plan
	broker   string
	notes    []string // what the user should know: printed, and at the top of the file
	problems []string
	pub      *wireMsg // the relay's publish of the probe
	idField  string   // the field or header that carried its id; "" the broker's own place
	id       string   // the probe's id as it was published
	del      *wireMsg // the consumer's delivery of it
	inbox    *Table
	inboxAt  time.Time // the consumer's commit that wrote the inbox row
	inboxTx  []string  // the tables that commit wrote
	// brokersComment is the evidence where no stream: is written.
	brokersComment string
}

// infer turns the probe's run into the plan. A problem is an
// *InputError; notes are returned either way.
func (x *inference) infer() error {
	for _, step := range []func() bool{x.publish, x.outbox, x.stream, x.delivery, x.inboxRow, x.readModel} {
		if !step() {
			break
		}
	}
	x.ready()
	if len(x.problems) > 0 {
		return &InputError{x.problems}
	}
	return nil
}

func (x *inference) problemf(format string, args ...any) bool {
	x.problems = append(x.problems, fmt.Sprintf(format, args...))
	return false
}

// said is the end of what the service's processes wrote, for a problem
// about it.
func (x *inference) said(service string) string {
	var out []string
	for _, s := range x.obs.res.Services {
		if s.Service == service {
			text := strings.TrimSpace(s.Output)
			if r := []rune(text); len(r) > 600 {
				text = "…" + string(r[len(r)-600:]) // its last words say why it ended
			}
			out = append(out, fmt.Sprintf("%s (%s) said:\n%s", service, s.Ended, indent(text)))
		}
	}
	if len(out) == 0 {
		return service + " never started"
	}
	return strings.Join(out, "\n")
}

func indent(s string) string {
	if s == "" {
		return "    (nothing)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// publish finds the relay's publish of the probe, and the field that
// carried its id: the outbox's event id column's, or another column's.
func (x *inference) publish() bool {
	var mine []*wireMsg
	for _, p := range x.obs.pubs {
		if p.service == "relay" {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 && x.stepFailed() != "" {
		return x.problemf("the probe's run failed before the relay published: %s", x.stepFailed())
	}
	if len(mine) == 0 {
		return x.problemf("the relay published nothing within %s of the probe's insert into %s: is it told where the database and the broker are (${producer_db.url}, ${broker.url}, ${destination})?%s %s",
			probeWait, x.f.outbox.Table.Ref(), x.otherOutboxes(), x.said("relay"))
	}
	for _, p := range mine {
		for _, name := range fieldOrder(p) {
			if p.fields[name] == x.f.probeID {
				x.pub, x.idField, x.id = p, name, x.f.probeID
				return true
			}
		}
	}
	// The id of another column: the relay publishes that one as the event id.
	for _, p := range mine {
		for _, name := range fieldOrder(p) {
			for _, c := range columnsHolding(x.f.outbox.Table, x.f.inserted, p.fields[name]) {
				if c != x.f.eventID && slices.Contains(x.f.outbox.EventIDs, c) {
					x.pub, x.idField, x.id = p, name, p.fields[name]
					x.notes = append(x.notes, fmt.Sprintf("the relay publishes %s.%s as the event id, not %s: the file maps that column", x.f.outbox.Table.Ref(), c.Name, x.f.eventID.Name))
					x.f.eventID = c
					if err := x.f.build(); err != nil {
						return x.problemf("%v", err)
					}
					return true
				}
			}
		}
	}
	return x.problemf("the relay published %d message(s), none carrying the probe's id %s where the runner can read it: %s", len(mine), x.f.probeID, describeMsgs(mine))
}

// stepFailed says how a step of the probe's run failed (produce, a
// start: not its last, the wait for the consumer's row), "" when none did.
func (x *inference) stepFailed() string {
	for _, s := range x.obs.res.Steps {
		for _, f := range s.Failures {
			if s.Call.Def.Name != "expect" {
				return f.Msg
			}
		}
	}
	return ""
}

// otherOutboxes names the other tables shaped like an outbox, which
// --outbox picks from: the probe went into the first only.
func (x *inference) otherOutboxes() string {
	if len(x.f.outboxes) < 2 {
		return ""
	}
	return " Or does it read another table? Of those shaped like an outbox the probe went into the first; pick with --outbox: " +
		refs(x.f.outboxes, func(o *Outbox) *Table { return o.Table }) + "."
}

// fieldOrder is the message's fields, its broker's own place first.
func fieldOrder(m *wireMsg) []string {
	names := []string{""}
	for k := range m.fields {
		if k != "" {
			names = append(names, k)
		}
	}
	slices.Sort(names[1:])
	return names
}

func describeMsgs(ms []*wireMsg) string {
	var out []string
	for _, m := range ms {
		var fs []string
		for _, k := range fieldOrder(m) {
			if k != "" {
				fs = append(fs, fmt.Sprintf("%s=%q", k, cut(m.fields[k])))
			}
		}
		out = append(out, fmt.Sprintf("%s to %s (id where the broker keeps one: %q; fields: %s)", m.Op, m.Dest, cut(m.EventID), strings.Join(fs, ", ")))
	}
	return strings.Join(out, "; ")
}

func cut(s string) string { return shorten(s, 60) }

// shorten is s cut to at most n runes, marked where cut.
func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// crossing is the first crossing of service on link after t (zero t:
// any) that ok accepts, nil without one.
func (x *inference) crossing(service, link string, after time.Time, ok func(fault.Crossing) bool) *fault.Crossing {
	for i, c := range x.obs.crossings {
		if c.Service == service && c.Link.String() == link && !c.At.Before(after) && ok(c) {
			return &x.obs.crossings[i]
		}
	}
	return nil
}

func writes(table string) func(fault.Crossing) bool {
	return func(c fault.Crossing) bool { return c.Boundary == fault.Commit && slices.Contains(c.Tables, table) }
}

func since(a, b time.Time) string {
	if d := b.Sub(a); d < time.Millisecond {
		return "<1ms"
	}
	return b.Sub(a).Round(time.Millisecond).String()
}
