package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/broker"
)

// window is one fault window of the guarantees document. Its evidence is a
// scenario that EXECUTED a step opening the window (shows) and passed: only
// then does the window hold on that broker. Its tags name the other
// scenarios about it, listed when they could not show it.
type window struct {
	title, question string
	tags            []string
	opens           string // what a scenario must execute, in words
	shows           func(StepRecord) bool
}

var windows = []window{
	{"Outbox → broker", "A relay that crashes between publishing and marking, or two relays racing, never lose an event; what does a retry leave in the broker?",
		[]string{"relay", "outbox"}, "a relay fault (skip_mark, skip_publish), relays racing, or a producer database crash",
		func(r StepRecord) bool {
			return r.Call.Def.Name == "relay" && (len(r.Call.Faults()) > 0 || param(r, "workers") > 1) || faulted(r, "producer_db")
		}},
	{"Broker process", "Does an acknowledged publish survive a broker crash, and does a relay fail cleanly while the broker is down?",
		[]string{"broker", "process-fault"}, "a kill, stop or restart of the broker process", func(r StepRecord) bool { return faulted(r, "broker") }},
	{"Consumer transaction and ack", "Inbox and projection commit or roll back together; an entry is acknowledged only after its commit.",
		[]string{"inbox", "consumer", "rollback"}, "a fault in a consume or claim (fail, skip_ack) or a consumer database crash",
		func(r StepRecord) bool {
			_, consumes := r.Call.Consumes()
			return consumes && len(r.Call.Faults()) > 0 || faulted(r, "consumer_db")
		}},
	{"Redelivery and takeover", "Can another worker take over a dead worker's unacknowledged entries, and without stealing from a live one?",
		[]string{"reclaim", "claim", "redelivery", "pending"}, "a delivery the broker had made before (a redelivery, or a claim that took entries over)",
		func(r StepRecord) bool {
			// A broker that counts no deliveries (a classic Kafka group)
			// shows a takeover only as a claim that got entries.
			return r.Result.Outcome["redelivered"] > 0 || r.Call.Def.Name == "claim" && r.Result.Outcome["delivered"] > 0
		}},
	{"Dedupe and identity", "A second delivery of the same business event is a duplicate; the same id with another payload is a conflict.",
		[]string{"dedupe", "identity", "conflict"}, "a delivery the inbox judged a duplicate or a conflict",
		func(r StepRecord) bool { return r.Result.Outcome["duplicate"]+r.Result.Outcome["conflict"] > 0 }},
	{"Poison messages", "A message that keeps failing goes to a dead-letter queue without blocking others, and replays under its own id.",
		[]string{"dlq", "poison"}, "an entry dead-lettered, by the application or by the broker (shown by a replay of it)",
		func(r StepRecord) bool {
			// A broker-made dead letter (broker_dlq) is no consume outcome:
			// its replay from the dead letters shows it.
			return r.Result.Outcome["dead_lettered"] > 0 || r.Call.Def.Name == "replay_dlq" && r.Result.Outcome["replayed"] > 0
		}},
	{"Ordering", "Events of one aggregate are applied in version order even when delivered out of order.",
		[]string{"ordering"}, "an event held back by strict ordering", func(r StepRecord) bool { return r.Result.Outcome["deferred"] > 0 }},
	{"Loss and reconciliation", "When the broker loses published entries, reconciliation republishes them and each is applied once.",
		[]string{"reconciliation", "retention"}, "a reconciliation that republished lost events",
		func(r StepRecord) bool { return r.Call.Def.Name == "reconcile" && r.Result.Outcome["republished"] > 0 }},
}

// faulted reports whether r is a step named step that injected a fault.
func faulted(r StepRecord, step string) bool {
	return r.Call.Def.Name == step && len(r.Call.Faults()) > 0
}

// param is an integer parameter of r's step (0 if it has none).
func param(r StepRecord, name string) int {
	n, _ := r.Call.ParamValues()[name].(int)
	return n
}

// Shows reports whether result r is evidence for the window titled title:
// it passed on its broker, was not skipped, is not an anti-pattern (whose
// damage is the point), and executed a step that opens the window.
func Shows(title string, r *Result) bool {
	i := slices.IndexFunc(windows, func(w window) bool { return w.title == title })
	return i >= 0 && windows[i].evidence(r)
}

// WindowTitles are the fault windows of the guarantees document, in order.
func WindowTitles() []string {
	var ts []string
	for _, w := range windows {
		ts = append(ts, w.title)
	}
	return ts
}

func (w window) evidence(r *Result) bool {
	if !r.Passed() || r.Skipped != "" || slices.Contains(r.Scenario.Tags, "antipattern") {
		return false
	}
	return slices.ContainsFunc(r.Steps, w.shows)
}

// about reports whether r belongs to the window: tagged for it, or it
// executed a step that opens it.
func (w window) about(r *Result) bool {
	return slices.ContainsFunc(r.Scenario.Tags, func(t string) bool { return slices.Contains(w.tags, t) }) ||
		slices.ContainsFunc(r.Steps, w.shows)
}

// WriteGuarantees writes docs/broker-guarantees.md from a matrix run: per
// fault window and broker, what held, what failed and what could not be
// shown there, naming the scenarios as evidence.
func WriteGuarantees(w io.Writer, rep *Report) error {
	var b strings.Builder
	b.WriteString(`# What each broker guarantees, scenario by scenario

<!-- Generated by "go run ./cmd/runner run --broker all --guarantees docs/broker-guarantees.md scenarios/"
     from a full matrix run. Do not edit by hand. -->

Every scenario of the library ran on every broker below, unchanged. A window **holds** on a broker only
with evidence: at least one scenario executed that window's fault there (named below for each window) and
passed. Otherwise it is **not shown**, with the reason for each scenario about it: skipped (a step needs
what the broker cannot do, cited), or passed without reaching the fault. **fails** names the scenario that
failed. Anti-patterns are listed apart: their passing shows the damage, never that the window holds.
"†" marks scenarios that state broker-specific expectations, because the broker legitimately behaves
otherwise; "(n n/a)" counts state checks the broker cannot read, reported and not judged.

`)
	writeCapabilities(&b, rep)
	b.WriteString("\n## How each broker does it\n\n| |")
	for _, br := range rep.Brokers {
		b.WriteString(" " + rep.Label(br) + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(rep.Brokers)) + "\n")
	// In words, how each broker does what the pipeline needs (its Kind's
	// Mechanisms); the runner's adapters are built on exactly these.
	for _, m := range broker.AllMechanisms {
		fmt.Fprintf(&b, "| %s |", m)
		for _, br := range rep.Brokers {
			b.WriteString(" " + mechanism(br, m) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n## Fault windows\n")
	for _, win := range windows {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n", win.title, win.question)
		for _, br := range rep.Brokers {
			fmt.Fprintf(&b, "- **%s**: %s\n", rep.Label(br), verdict(rep, win, br))
		}
	}
	// A server that is not the broker itself (kfake) says what its
	// column can show.
	for _, br := range rep.Brokers {
		if k, ok := broker.Lookup(br); ok && rep.Label(br) != br {
			b.WriteString(k.LabelNote)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeCapabilities(b *strings.Builder, rep *Report) {
	caps := Capabilities(rep)
	b.WriteString("## Capabilities\n\n| capability |")
	for _, br := range rep.Brokers {
		b.WriteString(" " + rep.Label(br) + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(rep.Brokers)) + "\n")
	for _, c := range broker.AllCapabilities {
		fmt.Fprintf(b, "| `%s` |", c)
		for _, br := range rep.Brokers {
			mark := "—"
			if caps[br].Has(c) {
				mark = "yes"
			}
			b.WriteString(" " + mark + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\nWhat each broker cannot do, in its own documentation:\n\n")
	for _, br := range rep.Brokers {
		for _, c := range broker.AllCapabilities {
			if !caps[br].Has(c) {
				fmt.Fprintf(b, "- **%s** has no `%s`: %s\n", br, c, mdLine(broker.WhyNot(br, c)))
			}
		}
	}
}

// Capabilities are the capability sets of the report's brokers, with the
// default settings of each.
func Capabilities(rep *Report) map[string]broker.Capabilities {
	caps := map[string]broker.Capabilities{}
	for _, r := range rep.Results {
		if caps[r.Broker] == nil && r.Caps != nil && !r.Scenario.Tuned(r.Broker) {
			caps[r.Broker] = r.Caps
		}
	}
	return caps
}

// verdict sums up one window on one broker. It holds only with evidence: a
// scenario that executed the window's fault and passed there. Anything
// else about the window is listed with why it shows nothing.
func verdict(rep *Report, win window, br string) string {
	var shown, failed, damage, notShown []string
	for _, r := range rep.Results {
		if r.Broker != br || !win.about(r) {
			continue
		}
		name := "“" + mdCell(r.Scenario.Name) + "”" + marks(r)
		switch {
		case !r.Passed():
			failed = append(failed, name)
		case r.Skipped != "":
			notShown = append(notShown, name+" (skipped: "+mdLine(skipReason(r.Skipped))+")")
		case slices.Contains(r.Scenario.Tags, "antipattern"):
			damage = append(damage, name)
		case win.evidence(r):
			shown = append(shown, name)
		default:
			notShown = append(notShown, name+" (passed without executing "+win.opens+")")
		}
	}
	var parts []string
	switch {
	case len(failed) > 0:
		parts = append(parts, "**fails** in "+strings.Join(failed, ", "))
	case len(shown) > 0:
		parts = append(parts, fmt.Sprintf("**holds** — shown by %d scenario(s) that executed %s and passed: %s", len(shown), win.opens, strings.Join(shown, ", ")))
	default:
		parts = append(parts, "**not shown**: no scenario executed "+win.opens+" and passed here")
	}
	if len(damage) > 0 {
		parts = append(parts, fmt.Sprintf("anti-pattern damage shown by %d: %s", len(damage), strings.Join(damage, ", ")))
	}
	if len(notShown) > 0 {
		parts = append(parts, fmt.Sprintf("not shown by %d: %s", len(notShown), strings.Join(notShown, "; ")))
	}
	return strings.Join(parts, "; ")
}

// marks are a result's annotations: † for broker-specific expectations,
// the count of checks that were n/a.
func marks(r *Result) string {
	m := ""
	if r.Scenario.HasOverrides(r.Broker) {
		m += " †"
	}
	if len(r.NA) > 0 {
		m += fmt.Sprintf(" (%d n/a)", len(r.NA))
	}
	return m
}

// skipReason drops the file position from a skip reason.
func skipReason(s string) string {
	if i := strings.Index(s, ".yaml:"); i >= 0 {
		if j := strings.Index(s[i:], ": "); j >= 0 {
			return s[i+j+2:]
		}
	}
	return s
}

// mechanism is how broker br does m, in its kind's words ("" for a
// broker nobody registered).
func mechanism(br string, m broker.Mechanism) string {
	if k, ok := broker.Lookup(br); ok {
		return k.Mechanisms[m]
	}
	return ""
}
