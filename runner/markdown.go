package runner

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteMarkdown writes a summary table, then for each failed scenario its
// failures and its trace as a Mermaid sequence diagram (Producer PG, Relay,
// Broker, Consumer PG) with the injected faults as notes. It fits a CI job
// summary ($GITHUB_STEP_SUMMARY).
func WriteMarkdown(w io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Outbox drill: %d passed, %d failed", len(rep.Results)-rep.Failed()-rep.Skipped(), rep.Failed())
	if n := rep.Skipped(); n > 0 {
		fmt.Fprintf(&b, ", %d skipped", n)
	}
	if len(rep.NotRun) > 0 {
		fmt.Fprintf(&b, ", %d not run", len(rep.NotRun))
	}
	fmt.Fprintf(&b, " (%s)\n\n", rep.Duration.Round(time.Millisecond))
	if len(rep.Brokers) > 1 {
		writeMatrix(&b, rep)
	}
	b.WriteString("| result | scenario | file | time |\n|---|---|---|---|\n")
	for _, r := range rep.Results {
		status := "✅ pass"
		switch {
		case !r.Passed():
			status = "❌ **FAIL**"
		case r.Skipped != "":
			status = "⏭ skip: " + mdCell(r.Skipped)
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s |\n", status, mdCell(r.Name()), r.Scenario.File, r.Duration.Round(time.Millisecond))
	}
	for _, sc := range rep.NotRun {
		fmt.Fprintf(&b, "| ⏭ not run | %s | `%s` | — |\n", mdCell(sc.Name), sc.File)
	}
	for _, r := range rep.Results {
		if r.Passed() {
			continue
		}
		fmt.Fprintf(&b, "\n### ❌ %s\n\n```\n", mdCell(r.Name()))
		for _, f := range r.Failures {
			b.WriteString(f.String() + "\n")
		}
		b.WriteString("```\n\n```mermaid\n" + SequenceDiagram(r) + "```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMatrix leads a run on several brokers: one row per scenario, one
// column per broker. "†" marks a cell where the scenario's broker-specific
// expectations applied instead of the common ones.
func writeMatrix(b *strings.Builder, rep *Report) {
	type row struct {
		sc    *Scenario
		cells map[string]string
	}
	var rows []*row
	byScenario := map[*Scenario]*row{}
	for _, r := range rep.Results {
		rw := byScenario[r.Scenario]
		if rw == nil {
			rw = &row{sc: r.Scenario, cells: map[string]string{}}
			byScenario[r.Scenario] = rw
			rows = append(rows, rw)
		}
		rw.cells[r.Broker] = matrixCell(r)
	}
	b.WriteString("| scenario |")
	for _, br := range rep.Brokers {
		b.WriteString(" " + br + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(rep.Brokers)) + "\n")
	for _, rw := range rows {
		fmt.Fprintf(b, "| %s |", mdCell(rw.sc.Name))
		for _, br := range rep.Brokers {
			cell := rw.cells[br]
			if cell == "" {
				cell = "not run"
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n† broker-specific expectations applied (see the scenario file)\n\n")
}

func matrixCell(r *Result) string {
	cell := "✅ pass"
	switch {
	case !r.Passed():
		return "❌ **FAIL**"
	case r.Skipped != "":
		return "⏭ skip: " + mdCell(skipReason(r.Skipped)) // the position is in the detailed table
	}
	if r.Scenario.HasOverrides(r.Broker) {
		cell += " †"
	}
	return cell
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// Mermaid participants: short ids, readable names.
const (
	pProducer = "PPG"
	pRelay    = "R"
	pBroker   = "B"
	pConsumer = "CPG"
)

// SequenceDiagram draws a scenario's steps as a Mermaid sequenceDiagram.
func SequenceDiagram(r *Result) string {
	var d diagram
	d.line("sequenceDiagram")
	d.line("  participant %s as Producer PG", pProducer)
	d.line("  participant %s as Relay", pRelay)
	d.line("  participant %s as Broker", pBroker)
	d.line("  participant %s as Consumer PG", pConsumer)
	for _, st := range r.Steps {
		drawStep(&d, st)
	}
	return d.String()
}

type diagram struct{ strings.Builder }

func (d *diagram) line(format string, args ...any) {
	fmt.Fprintf(d, format+"\n", args...)
}

func (d *diagram) msg(from, to, arrow, text string) {
	d.line("  %s%s%s: %s", from, arrow, to, mermaidText(text))
}

func (d *diagram) note(over, text string) {
	d.line("  Note over %s: %s", over, mermaidText(text))
}

// mermaidText keeps a label on one line and away from Mermaid's syntax:
// ";" ends a statement, "#" starts an entity, "<" ">" are read as HTML.
func mermaidText(s string) string {
	s = strings.NewReplacer("\n", " ", ";", ",", "#", "no. ", "<", "‹", ">", "›", "%%", "%").Replace(s)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

func drawStep(d *diagram, st StepRecord) {
	for _, f := range st.Call.Faults() {
		d.note(faultSite(st.Call.Def.Name), "FAULT "+f+" ("+st.Call.Pos.String()+")")
	}
	switch st.Call.Def.Name {
	case "produce":
		for _, line := range st.Result.Details { // "committed bus-1: 100 USD alice → bob" or the rollback
			d.note(pProducer, line)
		}
	case "relay":
		d.msg(pRelay, pProducer, "->>", "SELECT unpublished outbox rows")
		for _, e := range st.Result.Entries {
			d.msg(pRelay, pBroker, "->>", fmt.Sprintf("XADD %s → %s", e.EventID, e.EntryID))
		}
		if n := st.Result.Outcome["marked"]; n > 0 {
			d.msg(pRelay, pProducer, "->>", fmt.Sprintf("mark %d row(s) published", n))
		}
	case "publish", "replay_dlq":
		verb := map[string]string{"publish": "raw XADD", "replay_dlq": "replay from the dead-letter stream, XADD"}[st.Call.Def.Name]
		for _, e := range st.Result.Entries {
			d.note(pBroker, fmt.Sprintf("%s %s → %s", verb, e.EventID, e.EntryID))
		}
	case "sleep":
		d.note(pProducer+","+pConsumer, st.Call.String())
	case "consume", "claim":
		verb := "XREADGROUP"
		if st.Call.Def.Name == "claim" {
			verb = "XCLAIM"
		}
		for _, e := range st.Result.Entries {
			d.msg(pBroker, pConsumer, "->>", fmt.Sprintf("%s %s (%s)", verb, e.EntryID, e.EventID))
			d.note(pConsumer, e.Outcome)
			if e.DeadLettered {
				d.note(pBroker, "to the dead-letter stream: "+e.EventID)
			}
			if e.Acked {
				d.msg(pConsumer, pBroker, "-->>", "XACK "+e.EntryID)
			}
		}
		if len(st.Result.Entries) == 0 {
			d.note(pBroker, verb+": nothing delivered")
		}
	case "expect":
		var ok []string
		for _, ob := range st.Result.Observed {
			if ob.OK {
				ok = append(ok, ob.Key)
			}
		}
		if len(ok) > 0 {
			d.note(pProducer+","+pConsumer, "expect ok: "+strings.Join(ok, ", "))
		}
	}
	for _, f := range st.Failures {
		d.note(pProducer+","+pConsumer, fmt.Sprintf("FAIL %s: %s", f.Key, firstLine(f.Msg)))
	}
}

// faultSite is where a step's fault strikes.
func faultSite(step string) string {
	switch step {
	case "produce":
		return pProducer
	case "relay":
		return pRelay
	}
	return pConsumer
}
