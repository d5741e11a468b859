package htmlreport

import (
	"bytes"
	"cmp"
	"html/template"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Coverage is `runner explore`'s coverage as a picture: a row per
// service, boundary and nth, a column per fault action, each cell the
// point's outcome, coloured, a violation's linking to its minimal
// scenario and the page with its timeline.
type Coverage struct {
	System, Workload string
	Summary          string // explore's closing line
	Seed             string // the random mode's, "" for none
	Version          string
	Actions          []string
	Rows             []CoverageRow
	Findings         []CoverageFinding
}

// CoverageRow is one service's boundary at one nth.
type CoverageRow struct {
	Service, Boundary string
	Nth               int
	Cells             []CoverageCell // one per action, in Coverage.Actions order
}

// CoverageCell is one point: its outcome ("" where the action does not
// apply), why, and the finding it broke (1-based; 0 for none).
type CoverageCell struct {
	Outcome, Why string
	Finding      int
}

// CoverageFinding is one violation explore wrote as a minimal scenario.
type CoverageFinding struct {
	Broken, Faults, Why, Shrunk string
	// Scenario and Timeline are links from the coverage page: the
	// written scenario file, and the page that draws its run.
	Scenario, Timeline string
}

// RenderCoverage renders c as one self-contained HTML page.
func RenderCoverage(c Coverage, opt Options) ([]byte, error) {
	cl := cleaner{opt.Hide}
	v := coverageView{Summary: cl.line(c.Summary), Title: cl.name(c.System) + " · " + cl.name(c.Workload), Seed: cl.name(c.Seed),
		Version: cl.line(cmp.Or(c.Version, "runner (version not recorded)")), Generated: cmp.Or(opt.Now, time.Now()).UTC().Format(time.RFC3339)}
	for _, a := range c.Actions {
		v.Actions = append(v.Actions, cl.name(a))
	}
	for _, r := range c.Rows {
		row := coverageRowView{Service: cl.name(r.Service), Boundary: cl.name(r.Boundary), Nth: r.Nth}
		pruned := true
		for _, cell := range r.Cells {
			cv := cellView{Class: outcomeClass(cell.Outcome), Text: cl.name(cmp.Or(cell.Outcome, "—")), Title: cl.line(cell.Why)}
			if cell.Finding > 0 && cell.Finding <= len(c.Findings) {
				cv.Href = c.Findings[cell.Finding-1].Timeline
			}
			pruned = pruned && (cell.Outcome == "pruned" || cell.Outcome == "")
			row.Cells = append(row.Cells, cv)
		}
		if pruned {
			v.Pruned = append(v.Pruned, row)
		} else {
			v.Rows = append(v.Rows, row)
		}
	}
	for i, f := range c.Findings {
		v.Findings = append(v.Findings, findingView{N: i + 1, Broken: cl.name(f.Broken), Faults: cl.line(f.Faults), Why: cl.line(f.Why),
			Shrunk: cl.line(f.Shrunk), Scenario: f.Scenario, Timeline: f.Timeline, File: cl.name(f.Scenario)})
	}
	var b bytes.Buffer
	err := coveragePage().Execute(&b, v)
	return b.Bytes(), err
}

// outcomeClass is an explore outcome as a CSS class.
func outcomeClass(o string) string {
	switch {
	case o == "":
		return "none"
	case strings.HasPrefix(o, "not selected"):
		return "notselected"
	}
	return strings.ReplaceAll(o, " ", "")
}

type coverageView struct {
	Title, Summary, Seed, Version, Generated string
	Actions                                  []string
	Rows, Pruned                             []coverageRowView
	Findings                                 []findingView
}

type coverageRowView struct {
	Service, Boundary string
	Nth               int
	Cells             []cellView
}

type cellView struct{ Class, Text, Title, Href string }

type findingView struct {
	N                                 int
	Broken, Faults, Why, Shrunk, File string
	Scenario, Timeline                string
}

var coveragePage = lazy.Value("htmlreport coverage page", func() *template.Template {
	return template.Must(template.New("coverage").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Explore: {{.Title}}</title>
<style>` + css + coverageCSS + `</style></head>
<body>
<header><h1>Explore <small>{{.Title}}</small></h1>
<div class="cards"><div class="card meta" id="version">version<br><code>{{.Version}}</code></div>
{{if .Seed}}<div class="card meta" id="seed">seed<br><code>{{.Seed}}</code></div>{{end}}
<div class="card meta">written<br><code>{{.Generated}}</code></div></div>
<p class="summary">{{.Summary}}</p></header>
{{if .Findings}}<h2>Violations</h2><ol class="findings">{{range .Findings}}
<li id="f{{.N}}"><b>{{.Broken}}</b> — {{if .Faults}}{{.Faults}}{{else}}the workload without a fault{{end}} <small>(shrunk: {{.Shrunk}})</small><br>{{.Why}}<br>
{{if .Timeline}}<a href="{{.Timeline}}">its timeline</a> · {{end}}<a href="{{.Scenario}}">the minimal scenario</a> <code>{{.File}}</code></li>{{end}}
</ol>{{end}}
<h2>Coverage</h2>
<p class="legend"><span class="cell held">held</span> <span class="cell violation">violation</span> <span class="cell notjudged">not judged</span> <span class="cell notselected">not selected</span> <span class="cell pruned">pruned</span> <span class="cell unclassifiable">unclassifiable</span> <span class="cell neverreached">never reached</span> <span class="cell notexplored">not explored</span></p>
<table class="coverage" id="coverage"><tr><th>service</th><th>boundary</th><th>nth</th>{{range .Actions}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}{{template "row" .}}{{end}}</table>
{{if .Pruned}}<details><summary>{{len .Pruned}} row(s) where every point was pruned</summary><table class="coverage">
{{range .Pruned}}{{template "row" .}}{{end}}</table></details>{{end}}
</body></html>
{{define "row"}}<tr><td>{{.Service}}</td><td><code>{{.Boundary}}</code></td><td>{{.Nth}}</td>{{range .Cells}}<td class="cell {{.Class}}" title="{{.Title}}">{{if .Href}}<a href="{{.Href}}">{{.Text}}</a>{{else}}{{.Text}}{{end}}</td>{{end}}</tr>
{{end}}`))
})

const coverageCSS = `
.cell.violation{background:#f6b8b8;font-weight:700}.cell.held{background:#c8f0c8}.cell.notselected{background:#dde7f7;color:#456}
.cell.pruned,.cell.none{background:#f4f4f4;color:#999}.cell.unclassifiable{background:#e8d8f4}.cell.neverreached{background:#eee}
.cell.notexplored{background:#fff;color:#777}table.coverage td{font-size:12px}
`
