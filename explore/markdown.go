package explore

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/safe"
)

// WriteMarkdown writes what a CI summary shows of an exploration: the
// violations and the points not judged first, then the coverage (a
// boundary × action table per service, the rows where no point ran
// collapsed into one line of counts), then the boundary map.
func (r *Result) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Explore: %s\n\nWorkload: %s. ", safe.Line(r.Workload.System.File), safe.Line(r.Workload.Name))
	if r.Shard != nil {
		fmt.Fprintf(&b, "%s. ", r.Shard)
	}
	if r.Observed.Outcome != Held {
		fmt.Fprintf(&b, "The workload fails without any fault: %s\n", safe.Line(r.Observed.String()))
		_, err := io.WriteString(w, b.String())
		return err
	}
	c := r.Counts()
	pruned, selected := r.prunedCounts()
	fmt.Fprintf(&b, "%d point(s) run: %d held, %d violation(s), %d not judged; %d pruned, %d not selected (--only); %s. %s.\n\n",
		r.Run(), c[Held], c[Violated], c[NotJudged]+c[Unclassed]+c[NotReached]+c[NotRun], pruned, selected, r.Took.Round(time.Second), unbalancedNote)
	r.violationsMarkdown(&b)
	r.notJudgedMarkdown(&b)
	r.coverageTables(&b)
	r.mapMarkdown(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// prunedCounts are the points pruned and those --only did not select.
func (r *Result) prunedCounts() (pruned, notSel int) {
	for _, p := range r.Points {
		switch {
		case p.Pruned == "":
		case pruneKind(p.Pruned) == notSelected:
			notSel++
		default:
			pruned++
		}
	}
	return pruned, notSel
}

func (r *Result) violationsMarkdown(b *strings.Builder) {
	if len(r.Findings) == 0 {
		return
	}
	b.WriteString("## Violations\n\n")
	for _, f := range r.Findings {
		fmt.Fprintf(b, "- ❌ **%s** — %s: %s. Shrunk: %s; %s. Written: `%s`\n", strings.Join(f.Broken, ", "),
			safe.Line(faultList(r.Workload, f.Minimal.Faults)), safe.Line(f.Why), f.Shrunk, f.Reproduces(), safe.Line(f.File))
		if len(f.Also) > 0 {
			fmt.Fprintf(b, "  - also at: %s\n", alsoAt(f.Also))
		}
	}
	b.WriteString("\n")
}

// notJudgedMarkdown lists the points that ran without a verdict of held
// or violated: not judged, unclassifiable, never reached, not explored.
func (r *Result) notJudgedMarkdown(b *strings.Builder) {
	var rows []string
	for _, p := range r.runPoints() {
		if p.Outcome != Held && p.Outcome != Violated {
			rows = append(rows, fmt.Sprintf("| %s | ⚠️ %s | %s |\n", safe.Line(p.String()), p.Outcome, strings.ReplaceAll(safe.Line(p.Why), "|", `\|`)))
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Not judged\n\n| point | outcome | why |\n|---|---|---|\n")
	for i, row := range rows {
		if i == maxNotJudged {
			fmt.Fprintf(b, "\n… and %d more (the JSON report has them all)\n", len(rows)-i)
			break
		}
		b.WriteString(row)
	}
	b.WriteString("\n")
}

// maxNotJudged bounds the list of points not judged: a budget that ran out
// leaves many, and a CI summary shows the first and how many.
const maxNotJudged = 30

// coverageTables: per service, a row per trigger and nth (and second
// fault, depth 2), a column per action, each cell the point's outcome; the
// rows where no point ran are one line of counts below the table.
func (r *Result) coverageTables(b *strings.Builder) {
	b.WriteString("## Coverage\n\n")
	for _, svc := range r.services() {
		actions := map[string]bool{}
		rows := map[string]map[string]*Point{}
		var order []string
		for _, p := range r.Points {
			if p.Service != svc {
				continue
			}
			row := rowOf(p)
			if rows[row] == nil {
				rows[row] = map[string]*Point{}
				order = append(order, row)
			}
			rows[row][p.Do] = p
			actions[p.Do] = true
		}
		acts := slices.Sorted(maps.Keys(actions))
		fmt.Fprintf(b, "**%s**\n\n| boundary | %s |\n|---|%s\n", safe.Line(svc), strings.Join(acts, " | "), strings.Repeat("---|", len(acts)))
		idle := map[string]int{}
		idleRows := 0
		for _, row := range order {
			if !anyRan(rows[row]) {
				idleRows++
				for _, p := range rows[row] {
					idle[pruneKind(p.Pruned)]++
				}
				continue
			}
			cells := make([]string, len(acts))
			for i, a := range acts {
				cells[i] = cell(rows[row][a])
			}
			fmt.Fprintf(b, "| %s | %s |\n", safe.Line(row), strings.Join(cells, " | "))
		}
		if idleRows > 0 {
			fmt.Fprintf(b, "\n%d more boundary row(s) where no point ran: %s.\n", idleRows, kindCounts(idle))
		}
		b.WriteString("\n")
	}
}

// services are the points' services, in the points' order.
func (r *Result) services() []string {
	var out []string
	for _, p := range r.Points {
		if !slices.Contains(out, p.Service) {
			out = append(out, p.Service)
		}
	}
	return out
}

// rowOf is a point's row in the coverage: its trigger and nth, and a
// second fault's (depth 2), whose cells would otherwise cover the first's.
func rowOf(p *Point) string {
	row := fmt.Sprintf("`%s` nth=%d", p.where(), p.Nth)
	if f := p.Second; f != nil {
		row += fmt.Sprintf(" + %s: `%s` nth=%d do=%s", f.Where, f.On.On(), f.Nth, f.Do)
	}
	return row
}

// anyRan: a point of the row was run (not pruned, not left out by --only).
func anyRan(row map[string]*Point) bool {
	for _, p := range row {
		if p.Pruned == "" {
			return true
		}
	}
	return false
}

func cell(p *Point) string {
	switch {
	case p == nil:
		return "—"
	case pruneKind(p.Pruned) == notSelected:
		return "not selected"
	case p.Pruned != "":
		return "pruned"
	case p.Outcome == Violated:
		return "❌ **violation: " + strings.Join(p.Broken, ", ") + "**"
	case p.Outcome == Held:
		return "✅ held"
	}
	return "⚠️ " + string(p.Outcome)
}

// mapMarkdown is the boundary map: each service's boundaries and how
// often the fault-free run crossed them; one no point strikes says why.
func (r *Result) mapMarkdown(b *strings.Builder) {
	b.WriteString("## Boundary map\n\n")
	for _, s := range r.Map.Services {
		fmt.Fprintf(b, "**%s** (started at %s)\n\n| boundary | crossed |\n|---|---|\n", safe.Line(s.Service), s.Pos)
		for _, bd := range s.Boundaries {
			label := "`" + safe.Line(bd.Label) + "`"
			if bd.Skip != "" {
				label += " (no point: " + safe.Line(bd.Skip) + ")"
			}
			fmt.Fprintf(b, "| %s | %d |\n", label, bd.Count)
		}
		b.WriteString("\n")
	}
}

// alsoMax bounds an "also at" line: whole points, never one cut mid-word.
const alsoMax = 200

// alsoAt lists the other points of a finding, as many whole ones as fit
// in a line, and how many more the JSON report has.
func alsoAt(also []string) string {
	var parts []string
	n := 0
	for i, a := range also {
		s := safe.Line(a)
		if i > 0 && n+len(s) > alsoMax {
			return strings.Join(parts, "; ") + fmt.Sprintf("; and %d more (the JSON report has them all)", len(also)-i)
		}
		parts = append(parts, s)
		n += len(s) + 2
	}
	return strings.Join(parts, "; ")
}
