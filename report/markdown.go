package report

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
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
			status = "⏭ skip: " + mdLine(r.Skipped)
		default:
			status += notes(r)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", status, mdCell(r.Name()), mdCode(r.Scenario.File), r.Duration.Round(time.Millisecond))
	}
	for _, sc := range rep.NotRun {
		fmt.Fprintf(&b, "| ⏭ not run | %s | %s | — |\n", mdCell(sc.Name), mdCode(sc.File))
	}
	writePassedNotJudged(&b, rep)
	for _, r := range rep.Results {
		if r.Passed() {
			continue
		}
		var text strings.Builder
		for _, f := range r.Failures {
			text.WriteString(safe.Text(f.String()) + "\n")
		}
		fence := mdFence(text.String())
		fmt.Fprintf(&b, "\n### ❌ %s\n\n%s\n%s%s\n", mdCell(r.Name()), fence, text.String(), fence)
		writeNotJudged(&b, r)
		if len(r.Services) > 0 {
			said := strings.Join(serviceLines(r.Services), "\n") + "\n"
			fence := mdFence(said)
			fmt.Fprintf(&b, "\nWhat the services said:\n\n%s\n%s%s\n", fence, said, fence)
		}
		b.WriteString("\n```mermaid\n" + SequenceDiagram(r) + "```\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeMatrix leads a run on several brokers: one row per scenario, one
// column per broker. "†" marks a cell where the scenario's broker-specific
// expectations applied instead of the common ones.
func writeMatrix(b *strings.Builder, rep *Report) {
	type row struct {
		sc    *scenario.Scenario
		cells map[string]string
	}
	var rows []*row
	byScenario := map[*scenario.Scenario]*row{}
	for _, r := range rep.Results {
		rw := byScenario[r.Scenario]
		if rw == nil {
			rw = &row{sc: r.Scenario, cells: map[string]string{}}
			byScenario[r.Scenario] = rw
			rows = append(rows, rw)
		}
		rw.cells[r.Broker] = matrixCell(r)
	}
	// Under --repeat a cell stands for all its runs: a flaky one must not
	// show as its last run's pass.
	for _, f := range rep.Repeats() {
		byScenario[f.Scenario].cells[f.Broker] = repeatCell(f)
	}
	b.WriteString("| scenario |")
	for _, br := range rep.Brokers {
		b.WriteString(" " + rep.Label(br) + " |")
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

// repeatCell is the matrix cell of a scenario's runs under --repeat.
func repeatCell(f Repeated) string {
	switch {
	case f.Flaky():
		return "⚠️ **flaky**: " + f.String()
	case f.Failed > 0:
		return fmt.Sprintf("❌ **FAIL** (%d/%d runs)", f.Failed, f.Runs)
	case f.Skipped > 0:
		return fmt.Sprintf("⏭ skip (%d/%d runs)", f.Skipped, f.Runs)
	}
	return fmt.Sprintf("✅ pass (%d/%d runs)", f.Passed, f.Runs)
}

func matrixCell(r *Result) string {
	cell := "✅ pass"
	switch {
	case !r.Passed():
		return "❌ **FAIL**"
	case r.Skipped != "":
		return "⏭ skip: " + mdLine(skipReason(r.Skipped)) // the position is in the detailed table
	}
	cell += notes(r)
	if r.Scenario.HasOverrides(r.Broker) {
		cell += " †"
	}
	return cell
}

// notes counts, after a pass, the checks the broker could not read and the
// invariants nobody could judge: " (2 n/a, 4 not judged)".
func notes(r *Result) string {
	var parts []string
	if len(r.NA) > 0 {
		parts = append(parts, fmt.Sprintf("%d n/a", len(r.NA)))
	}
	if len(r.NotJudged) > 0 {
		parts = append(parts, fmt.Sprintf("%d not judged", len(r.NotJudged)))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// writeNotJudged lists what the history checker could not judge of r, and why.
func writeNotJudged(b *strings.Builder, r *Result) {
	lines := r.NotJudgedLines()
	if len(lines) == 0 {
		return
	}
	b.WriteString("\nNot judged (the verdict does not cover these):\n\n")
	for _, l := range lines {
		b.WriteString("- " + mdLine(l) + "\n")
	}
}

// writePassedNotJudged names, for every passing scenario with invariants
// not judged, what its pass does not cover: a ✅ never stands for them.
func writePassedNotJudged(b *strings.Builder, rep *Report) {
	for _, r := range rep.Results {
		if r.Passed() && r.Skipped == "" && len(r.NotJudged) > 0 {
			fmt.Fprintf(b, "\n### ✅ %s: passed, but the verdict does not cover all of it\n", mdCell(r.Name()))
			writeNotJudged(b, r)
		}
	}
}

// mdCell is a user string for a Markdown table cell or heading: one line,
// control characters escaped, long values cut, and what Markdown would
// read as markup of its own escaped: "|" (a cell's end), HTML (<img
// onerror=…>, <!-- hiding the rest) and links or images ([x](javascript:…)).
func mdCell(s string) string { return mdText.Replace(safe.Line(s)) }

// mdLine is a line of the runner's own built around user values (a skip
// reason) for a table cell: like mdCell, cut only beyond safe.MaxLine.
func mdLine(s string) string { return mdText.Replace(safe.LongLine(s)) }

var mdText = strings.NewReplacer("|", "\\|", "&", "&amp;", "<", "&lt;", ">", "&gt;", "[", "\\[", "]", "\\]")

// mdCode is s as inline code, in a table cell.
func mdCode(s string) string {
	s = safe.Line(s)
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return strings.ReplaceAll(fence+pad+s+pad+fence, "|", "\\|")
}

// mdFence is a code fence longer than any run of backticks in text, so
// that text cannot close it.
func mdFence(text string) string {
	fence := "```"
	for strings.Contains(text, fence) {
		fence += "`"
	}
	return fence
}

// SequenceDiagram draws a scenario's steps as a Mermaid sequenceDiagram:
// each step draws itself (steps.Drawn); failures are noted after it. A
// team's system is drawn from its wire history instead (wireDiagram).
func SequenceDiagram(r *Result) string {
	if r.Wire != nil {
		return wireDiagram(r)
	}
	var d diagram
	d.line("sequenceDiagram")
	for _, p := range steps.Participants {
		d.line("  participant %s as %s", p.ID, p.Title)
	}
	for _, st := range r.Steps {
		st.Call.Draw(&d, st.Result)
		for _, f := range st.Failures {
			d.Note(fmt.Sprintf("FAIL %s: %s", f.Key, summary(f.Msg)), steps.ProducerDB, steps.ConsumerDB)
		}
	}
	return d.String()
}

// diagram is a steps.Diagram that writes Mermaid.
type diagram struct{ strings.Builder }

func (d *diagram) line(format string, args ...any) {
	fmt.Fprintf(d, format+"\n", args...)
}

func (d *diagram) Msg(from, to steps.Participant, arrow, text string) {
	d.line("  %s%s%s: %s", from, arrow, to, mermaidText(text))
}

func (d *diagram) Note(text string, over ...steps.Participant) {
	ids := make([]string, len(over))
	for i, p := range over {
		ids[i] = string(p)
	}
	d.line("  Note over %s: %s", strings.Join(ids, ","), mermaidText(text))
}

// mermaidText keeps a label on one line and away from Mermaid's syntax:
// ";" ends a statement, "#" starts an entity, "<" ">" are read as HTML.
func mermaidText(s string) string {
	s = safe.LongLine(strings.ReplaceAll(s, "\n", " "))
	s = strings.NewReplacer(";", ",", "#", "no. ", "<", "‹", ">", "›", "%%", "%").Replace(s)
	if len(s) > 160 {
		n := 157
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "..."
	}
	return s
}
