package htmlreport

import (
	"html/template"

	"github.com/outboxdrill/runner/internal/lazy"
)

// page is the whole document. Nothing in it is fetched: the style and the
// script are inline, and its Content-Security-Policy forbids the browser
// to load anything else (an escaped payload that still looked like a
// link could not call home).
var page = lazy.Value("htmlreport page", func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"add": func(a, b int) int { return a + b },
		"sub": func(a, b int) int { return a - b },
	}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Outbox drill: {{.Summary}}</title>
<style>` + css + `</style></head>
<body>
<header><h1>Outbox drill <span class="word {{.Word}}">{{.Word}}</span></h1>
<div class="cards">
<div class="card passed"><b>{{.Passed}}</b> passed</div><div class="card failed"><b>{{.Failed}}</b> failed</div>
<div class="card skipped"><b>{{.Skipped}}</b> skipped</div>{{if .NotRun}}<div class="card notrun"><b>{{.NotRun}}</b> not run</div>{{end}}
<div class="card meta" id="version">version<br><code>{{.Version}}</code></div>
<div class="card meta">run<br><code>{{.RunID}}</code></div>
{{if .Seed}}<div class="card meta" id="seed">seed<br><code>{{.Seed}}</code></div>{{end}}
<div class="card meta">written<br><code>{{.Generated}}</code></div>
</div><p class="summary">{{.Summary}}</p></header>
{{if .Matrix}}<h2>Broker matrix</h2>
<table class="matrix" id="matrix"><tr><th>scenario</th>{{range .Brokers}}<th>{{.}}</th>{{end}}</tr>
{{range .Matrix}}<tr><td>{{.Name}}</td>{{range .Cells}}<td class="cell {{.Class}}" title="{{.Title}}">{{if .Href}}<a href="{{.Href}}">{{.Text}}</a>{{else}}{{.Text}}{{end}}</td>{{end}}</tr>
{{end}}</table>
<p class="legend"><span class="cell passed">pass</span> <span class="cell failed">FAIL</span> <span class="cell skipped">skipped</span> <span class="cell notjudged">passed, not all judged</span> <span class="cell notrun">not run</span></p>{{end}}
<h2>Scenarios</h2>
<table class="results" id="summary"><tr><th>result</th><th>scenario</th><th>broker</th><th>file</th><th>time</th><th>violations</th></tr>
{{range .Results}}<tr><td class="cell {{.Class}}">{{.Status}}</td><td><a href="#{{.ID}}">{{.Name}}</a></td><td>{{.Broker}}</td><td><code>{{.File}}</code></td><td>{{.Duration}}</td><td>{{len .Violations}}</td></tr>
{{end}}{{range .NotRunNames}}<tr><td class="cell notrun">not run</td><td colspan="5">{{.}}</td></tr>
{{end}}</table>
{{range .Results}}{{template "result" .}}{{end}}
<script>` + script + `</script>
</body></html>
{{define "result"}}<section class="result {{.Class}}" id="{{.ID}}">
<details{{if .Open}} open{{end}}><summary><span class="cell {{.Class}}">{{.Status}}</span> {{.Name}} <small>{{.Broker}} · {{.File}} · {{.Duration}}</small></summary>
{{if .Replay}}<div class="replay"><span>replay</span> <code>{{.Replay}}</code> <button type="button" class="copy">copy</button></div>{{end}}
{{if .Skipped}}<p class="skip">skipped at {{.Skipped}}</p>{{end}}
{{if .Failures}}<h3>Failures</h3><pre class="failures">{{range .Failures}}{{.}}
{{end}}</pre>{{end}}
{{if .Violations}}<h3>Violations <small>click one to light its witness on the timeline</small></h3><ul class="violations">{{range .Violations}}
<li class="violation" data-v="{{.ID}}" tabindex="0"><b>{{.Invariant}}</b>{{if .Declared}} <i>(declared)</i>{{end}}: {{.Text}} <small>(witness on {{.Drawn}} row(s) of the timeline)</small>
<ul>{{range .Witness}}<li>{{.}}</li>{{end}}</ul></li>{{end}}
</ul>{{end}}
{{if .NotJudged}}<h3>Not judged</h3><ul class="notjudged">{{range .NotJudged}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .NA}}<h3>n/a on this broker</h3><ul>{{range .NA}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Alerts}}<h3>Reported</h3><ul>{{range .Alerts}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Settled}}<p class="settled">system: {{.Settled}}</p>{{end}}
{{with .Timeline}}{{template "timeline" .}}{{end}}
{{if .Lanes}}<ul class="lanes">{{range .Lanes}}<li><b>{{.Title}}</b>{{if .Detail}}: {{.Detail}}{{end}}</li>{{end}}</ul>{{end}}
{{if .Services}}<h3>What the services said</h3>{{range .Services}}<p class="svc">{{.Label}}</p><pre>{{.Output}}</pre>{{end}}{{end}}
</details></section>
{{end}}
{{define "timeline"}}{{$id := .ID}}<h3>Timeline</h3><div class="tl-wrap">
<svg class="timeline" id="{{.ID}}-timeline" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" xmlns="http://www.w3.org/2000/svg">
<defs><marker id="{{.ID}}-head" viewBox="0 0 8 8" refX="7" refY="4" markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z"/></marker></defs>
{{range .Settle}}<rect class="settle" x="0" y="{{.Y}}" width="100%" height="{{.H}}"><title>the settle window</title></rect>
{{end}}{{range .Lanes}}<g class="lane {{.Kind}}{{if .Killed}} killed{{end}}"><title>{{.Title}}{{if .Detail}}: {{.Detail}}{{end}}</title><rect class="lane-head" x="{{.TopX}}" y="6" width="178" height="28" rx="4"/><text class="lane-title" x="{{.X}}" y="24" text-anchor="middle">{{.Title}}</text><line class="guide" x1="{{.X}}" x2="{{.X}}" y1="34" y2="{{.Y1}}"/><line class="lifeline" x1="{{.X}}" x2="{{.X}}" y1="{{.Y1}}" y2="{{.Y2}}"/>{{if .Killed}}<text class="killmark" x="{{.X}}" y="{{add .Y2 4}}" text-anchor="middle">✕</text>{{end}}</g>
{{end}}{{range .Rows}}<g class="row {{.Class}}"{{if .Witness}} data-v="{{.Witness}}"{{end}}><title>{{.Time}} {{.Full}}{{if .Fault}} — {{.Fault}}{{end}}</title>{{if .Witness}}<rect class="wit" x="0" y="{{sub .Y 11}}" width="100%" height="22"/>{{end}}<text class="time" x="6" y="{{add .Y 4}}">{{.Time}}</text>{{if eq .Kind "band"}}<rect class="bandbg" x="{{.X1}}" y="{{sub .Y 9}}" width="{{sub .X2 .X1}}" height="18" rx="3"/>{{else if eq .Kind "mark"}}<rect class="markbox" x="{{sub .X1 5}}" y="{{sub .Y 5}}" width="10" height="10"/>{{else}}<line class="arrowline" x1="{{.X1}}" y1="{{.Y}}" x2="{{.X2}}" y2="{{.Y}}" marker-end="url(#{{$id}}-head)"/>{{end}}<text class="label" x="{{.LabelX}}" y="{{.LabelY}}" text-anchor="{{.Anchor}}">{{.Label}}</text>{{if .Fault}}<text class="faultmark" x="{{.FaultX}}" y="{{add .Y 6}}" text-anchor="middle">⚡</text>{{end}}</g>
{{end}}</svg></div>
{{if .Cut}}<p class="cut">{{.Cut}} more rows were not drawn.</p>{{end}}
{{end}}`))
})

const css = `
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em 2em;color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.4em}h3{font-size:1em;margin:1em 0 .3em}
code,pre{font:12px/1.35 ui-monospace,monospace}pre{background:#f6f6f6;padding:.6em;overflow:auto;white-space:pre-wrap}
.word{padding:0 .4em;border-radius:4px}.word.ok{background:#c8f0c8}.word.FAIL{background:#f6b8b8}.word.INCOMPLETE{background:#fbe3a0}
.cards{display:flex;flex-wrap:wrap;gap:.6em;margin:.6em 0}.card{border:1px solid #ddd;border-radius:6px;padding:.4em .8em}
.card b{font-size:1.4em}.card.meta{font-size:12px;color:#555}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
.cell{padding:.1em .5em;border-radius:3px}.cell a{color:inherit}
.cell.passed{background:#c8f0c8}.cell.failed{background:#f6b8b8}.cell.skipped{background:#e4e4e4}.cell.notjudged{background:#fbe3a0}.cell.notrun{background:#fff;color:#777}
.card.failed b{color:#b00}
section.result{margin:1em 0;border:1px solid #ddd;border-radius:6px;padding:.4em .8em}section.result.failed{border-color:#e08a8a}
summary{cursor:pointer;font-weight:600}summary small{font-weight:400;color:#666}
.replay{margin:.5em 0;padding:.4em;background:#222;color:#eee;border-radius:4px}.replay span{color:#9c9}.replay code{user-select:all}
.violation{cursor:pointer;margin:.3em 0}.violation.on{outline:2px solid #e0a000}.violations small,.lanes{color:#555}
.tl-wrap{overflow:auto;border:1px solid #eee;max-height:80vh}
svg.timeline{font:11px ui-monospace,monospace;background:#fff}
.lane-head{fill:#f0f0f8;stroke:#99a}.lane.database .lane-head{fill:#eef6ee}.lane.broker .lane-head{fill:#f8f0e6}
.lane.killed .lane-head{stroke:#c00;stroke-width:2}.lane-title{font-weight:700}
.lifeline{stroke:#99a;stroke-width:1.5}.guide{stroke:#ccd;stroke-dasharray:2 4}.killmark{fill:#c00;font-size:16px;font-weight:700}
.settle{fill:#e6f0ff}
.arrowline{stroke:#333;stroke-width:1.3}marker path{fill:#333}.reply .arrowline{stroke-dasharray:5 3}
.fault .arrowline{stroke:#d00;stroke-width:2;stroke-dasharray:6 3}.fault .label{fill:#b00}.faultmark{font-size:14px}
.fault .markbox{fill:#d00}.markbox{fill:#889}.bandbg{fill:#f3f3f3}.fail .bandbg{fill:#fbd0d0}.fail .label{fill:#900;font-weight:700}
.label{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}.time{fill:#666}
.wit{fill:#ffe58a}.witness .arrowline{stroke:#c60;stroke-width:2.5}
svg.focus g.row:not(.on){opacity:.3}.row.on .wit{fill:#ffc400}
`

const script = `
document.querySelectorAll('li.violation').forEach(function(li){
  li.addEventListener('click',function(){
    var id=li.dataset.v, sec=li.closest('section'), on=!li.classList.contains('on');
    sec.querySelectorAll('li.violation').forEach(function(x){x.classList.remove('on')});
    sec.querySelectorAll('g.row').forEach(function(g){
      g.classList.toggle('on', on && (g.dataset.v||'').split(' ').indexOf(id)>=0)});
    var svg=sec.querySelector('svg.timeline'); if(svg){svg.classList.toggle('focus', on)}
    if(on){li.classList.add('on')}
  });
});
document.querySelectorAll('button.copy').forEach(function(b){
  b.addEventListener('click',function(){
    var text=b.parentNode.querySelector('code').textContent;
    if(navigator.clipboard){navigator.clipboard.writeText(text)}
  });
});
`
