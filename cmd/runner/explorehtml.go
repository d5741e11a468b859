package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxdrill/runner/explore"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/version"
	"github.com/outboxdrill/runner/report/htmlreport"
	"github.com/outboxdrill/runner/runner"
)

// writeExploreHTML writes explore's coverage as a picture to dir:
// index.html, the service × boundary × action grid, each violation's cell
// linking to finding-N.html, the HTML report of one more run of the
// minimal scenario written for it (its timeline), and to the scenario.
func writeExploreHTML(ctx context.Context, dir string, res *explore.Result, f *exploreFlags, stderr io.Writer) error {
	hide := redact.NewSet(redact.URLSecrets(append([]string{f.p.Runner.PGURL}, slices.Collect(maps.Values(f.p.Runner.URLs))...)...)...)
	opt := htmlreport.Options{Hide: hide}
	c := coverageOf(res, dir)
	c.Version = version.String()
	if f.random {
		c.Seed = strconv.FormatUint(f.rnd.Seed, 10)
		opt.Seed = c.Seed
	}
	for i, fd := range res.Findings {
		if c.Findings[i].Timeline == "" {
			continue
		}
		if err := findingPage(ctx, filepath.Join(dir, c.Findings[i].Timeline), fd.File, f, opt, stderr); err != nil {
			fmt.Fprintf(stderr, "runner %s: --html-dir: the timeline of %s: %s\n", f.cmd, fd.File, err)
			c.Findings[i].Timeline = ""
		}
	}
	data, err := htmlreport.RenderCoverage(c, opt)
	if err != nil {
		return err
	}
	return outfile.Write(filepath.Join(dir, "index.html"), data, 0o644)
}

// findingPage runs the written scenario once more, as `runner run FILE`
// would on explore's broker and servers, and writes its HTML report.
func findingPage(ctx context.Context, page, file string, f *exploreFlags, opt htmlreport.Options, stderr io.Writer) error {
	scs, ok := load(ctx, []string{file}, stderr)
	if !ok {
		return fmt.Errorf("it does not load")
	}
	p := f.p.Runner
	p.Out, p.Log, p.Warn, p.SystemRun = io.Discard, nil, nil, nil
	rep, err := runner.Run(ctx, p, scs)
	if rep == nil {
		return err
	}
	rep.Version = version.String()
	opt.Replay = []string{"--settle", p.Settle.String()}
	data, rerr := htmlreport.Render(rep, opt)
	if rerr != nil {
		return rerr
	}
	return outfile.Write(page, data, 0o644)
}

// coverageOf is res's points as the grid: a row per service, trigger
// (and depth 2's second fault) and nth, a column per action.
func coverageOf(res *explore.Result, dir string) htmlreport.Coverage {
	c := htmlreport.Coverage{System: fromHere(res.Workload.System.File), Workload: res.Workload.Name,
		Summary: fmt.Sprintf("%d point(s) run, %d pruned or not selected, %d violation(s), in %s", res.Run(), prunedCount(res), len(res.Findings), res.Took.Round(10*time.Millisecond))}
	found := map[string]int{} // a point's name → its finding, from 1
	for i, fd := range res.Findings {
		cf := htmlreport.CoverageFinding{Broken: strings.Join(fd.Broken, ", "), Why: fd.Why, Shrunk: fd.Shrunk, Scenario: relLink(dir, fd.File)}
		for _, ft := range fd.Minimal.Faults {
			cf.Faults = strings.TrimPrefix(cf.Faults+"; "+ft.String(), "; ")
		}
		if fd.File != "" && !strings.HasSuffix(fd.File, ".unconfirmed") {
			cf.Timeline = fmt.Sprintf("finding-%d.html", i+1)
		}
		c.Findings = append(c.Findings, cf)
		if fd.Point != nil {
			found[fd.Point.String()] = i + 1
		}
		for _, a := range fd.Also {
			found[a] = i + 1
		}
	}
	acts := map[string]bool{}
	for _, p := range res.Points {
		acts[p.Do] = true
	}
	c.Actions = slices.Sorted(maps.Keys(acts))
	rows := map[string]*htmlreport.CoverageRow{}
	var order []string
	for _, p := range res.Points {
		boundary := p.On.On()
		if p.Second != nil {
			boundary += fmt.Sprintf(" + %s: %s nth=%d do=%s", p.Second.Where, p.Second.On.On(), p.Second.Nth, p.Second.Do)
		}
		key := fmt.Sprintf("%s\x00%s\x00%d", p.Service, boundary, p.Nth)
		if rows[key] == nil {
			rows[key] = &htmlreport.CoverageRow{Service: p.Service, Boundary: boundary, Nth: p.Nth, Cells: make([]htmlreport.CoverageCell, len(c.Actions))}
			order = append(order, key)
		}
		rows[key].Cells[slices.Index(c.Actions, p.Do)] = pointCell(p, found[p.String()])
	}
	for _, k := range order {
		c.Rows = append(c.Rows, *rows[k])
	}
	return c
}

// pointCell is a point's outcome in the grid: a pruned point is "pruned",
// or "not selected" when --only left it out.
func pointCell(p *explore.Point, finding int) htmlreport.CoverageCell {
	switch {
	case strings.HasPrefix(p.Pruned, "not selected"):
		return htmlreport.CoverageCell{Outcome: "not selected", Why: p.Pruned}
	case p.Pruned != "":
		return htmlreport.CoverageCell{Outcome: "pruned", Why: p.Pruned}
	}
	return htmlreport.CoverageCell{Outcome: string(p.Outcome), Why: p.Why, Finding: finding}
}

func prunedCount(res *explore.Result) int {
	n := 0
	for _, p := range res.Points {
		if p.Pruned != "" {
			n++
		}
	}
	return n
}

// relLink is file as a link from a page in dir.
func relLink(dir, file string) string {
	if file == "" {
		return ""
	}
	absDir, err1 := filepath.Abs(dir)
	absFile, err2 := filepath.Abs(file)
	if rel, err := filepath.Rel(absDir, absFile); err1 == nil && err2 == nil && err == nil {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(file)
}

// fromHere is file relative to the working directory when it is below it
// (as a person gave it), else as it is.
func fromHere(file string) string {
	wd, err := os.Getwd()
	if err != nil || !filepath.IsAbs(file) {
		return file
	}
	if rel, err := filepath.Rel(wd, file); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return file
}
