package report

import (
	"fmt"
	"strings"
	"time"
)

// maxDiagramRows bounds a team's Mermaid diagram: a job summary shows it
// whole, and a renderer gives up on much longer ones.
const maxDiagramRows = 300

// wireDiagram draws a team's system as a Mermaid sequenceDiagram from its
// timeline: a participant per process, database and the broker, every wire
// operation an arrow in order with its time (a fault's ends in a cross),
// the steps and the settle window as notes across, the violations named
// on the arrows their witness rests on.
func wireDiagram(r *Result) string {
	t := TimelineOf(r)
	var d diagram
	d.line("sequenceDiagram")
	for _, l := range t.Lanes {
		title := l.Title
		if i := strings.LastIndex(title, " #"); i >= 0 && l.Kind == LaneProcess { // "relay #1": "#" starts an entity
			title = title[:i] + " " + title[i+2:]
		}
		d.line("  participant %s as %s", l.ID, mermaidText(title))
	}
	first, last := t.Lanes[0].ID, t.Lanes[len(t.Lanes)-1].ID
	for i, row := range t.Rows {
		if i == maxDiagramRows {
			d.line("  Note over %s,%s: %s", first, last, mermaidText(fmt.Sprintf("… %d more rows: see the HTML report", len(t.Rows)-i)))
			break
		}
		text := rowText(row) + witnessNames(r, row)
		switch row.Kind {
		case RowBand:
			d.line("  Note over %s,%s: %s", first, last, mermaidText(text))
		case RowMark:
			d.line("  Note over %s: %s", t.Lanes[row.From].ID, mermaidText(text))
		default:
			arrow := "->>"
			switch {
			case row.Fault != "":
				arrow = "-x"
			case row.Reply:
				arrow = "-->>"
			}
			d.line("  %s%s%s: %s", t.Lanes[row.From].ID, arrow, t.Lanes[row.To].ID, mermaidText(text))
		}
	}
	return d.String()
}

// rowText is a row's label with its time and count: "+1.204s XADD bus-1
// → 1-0", "+0.100s…+2.300s XREADGROUP → empty ×23".
func rowText(row Row) string {
	text := row.Text
	if row.Count > 1 {
		text = fmt.Sprintf("%s ×%d", text, row.Count)
	}
	if !row.Timed {
		return text
	}
	at := At(row.At)
	if row.Count > 1 {
		at += "…" + At(row.Until)
	}
	return at + " " + text
}

// At is a time on a timeline: "+1.204s".
func At(d time.Duration) string { return fmt.Sprintf("+%.3fs", d.Seconds()) }

// witnessNames are the invariants whose witness rests on row: " ⚠ lost,
// acked_without_effect".
func witnessNames(r *Result, row Row) string {
	if len(row.Witness) == 0 {
		return ""
	}
	names := make([]string, len(row.Witness))
	for i, vi := range row.Witness {
		names[i] = r.Violations[vi].Invariant
	}
	return " ⚠ " + strings.Join(names, ", ")
}
