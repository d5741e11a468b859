package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/outboxdrill/runner/explore"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/internal/version"
	"github.com/outboxdrill/runner/report/htmlreport"
)

// cmdExploreMerge is `runner explore merge DIR…`: the shards' records
// (each DIR a shard's --out) put together into the reports one unsharded
// run writes, their finding files gathered into --out. Exit 2 when the
// shards are not the N parts of one exploration; else as explore exits.
func cmdExploreMerge(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("explore merge")
	out := fs.String("out", "", "gather the shards' finding files into `DIR` (required; created), as one run writes them")
	var reports [3]string
	fs.StringVar(&reports[0], "junit", "", "write the merged JUnit XML report (one testcase per point that ran, the points not run summed in one skipped case) to `FILE`")
	fs.StringVar(&reports[1], "json", "", "write the merged JSON report (the boundary map, every point, the findings) to `FILE`")
	fs.StringVar(&reports[2], "markdown", "", "write the merged Markdown coverage report to `FILE`")
	htmlDir := fs.String("html-dir", "", "write the merged coverage as a picture to `DIR` (index.html; without the findings' timelines, which need one more run of each)")
	dirs, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	usage := func(format string, args ...any) int {
		fmt.Fprintf(stderr, "runner explore merge: "+format+"\nusage: %s\n", append(args, "runner explore merge "+subcommands["explore merge"].args)...)
		return exitInvalid
	}
	switch {
	case len(dirs) == 0:
		return usage("give the shards' --out directories")
	case *out == "":
		return usage("--out DIR is required: the shards' finding files are gathered there")
	}
	for _, dir := range []string{*out, *htmlDir} {
		if dir == "" {
			continue
		}
		if err := outfile.Dir(dir, 0o755); err != nil { // never through a planted symlink
			return usage("%v", err)
		}
	}
	res, err := explore.MergeDirs(ctx, dirs, *out)
	var merr *explore.MergeError
	switch {
	case errors.As(err, &merr):
		for _, p := range merr.Problems {
			fmt.Fprintf(stderr, "runner explore merge: %s\n", safe.Line(p))
		}
		return exitInvalid
	case err != nil:
		fmt.Fprintf(stderr, "runner explore merge: %s\n", safe.Text(err.Error()))
		return exitEnvironment
	}
	return writeMerged(res, dirs, reports[:], *htmlDir, stdout, stderr)
}

// writeMerged says and writes the merged result; its exit status is an
// unsharded run's.
func writeMerged(res *explore.Result, dirs, reports []string, htmlDir string, stdout, stderr io.Writer) int {
	files, err := openReports(reports)
	if err != nil {
		fmt.Fprintf(stderr, "runner explore merge: %v\n", err)
		return exitInvalid
	}
	defer closeAll(files)
	fmt.Fprintf(stdout, "explore merge: %d shard director(ies) of %s, workload %q\n", len(dirs), safe.Line(res.Workload.System.File), safe.Line(res.Workload.Name))
	res.Summary(stdout)
	err = writeExploreReports(files, res)
	if htmlDir != "" {
		err = errors.Join(err, writeMergedHTML(htmlDir, res))
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "runner explore merge: %s\n", safe.Text(err.Error()))
		return exitEnvironment
	case res.Observed.Outcome != explore.Held || len(res.Findings) > 0:
		return exitFailed
	}
	return exitOK
}

// writeMergedHTML is the coverage grid of --html-dir, each violation
// linking to its scenario file; the timelines (finding-N.html) are left
// out: each is one more run of the finding, on servers a merge has not.
func writeMergedHTML(dir string, res *explore.Result) error {
	c := coverageOf(res, dir)
	c.Version = version.String()
	for i := range c.Findings {
		c.Findings[i].Timeline = ""
	}
	data, err := htmlreport.RenderCoverage(c, htmlreport.Options{})
	if err != nil {
		return err
	}
	return outfile.Write(filepath.Join(dir, "index.html"), data, 0o644)
}

// subcommands are the usage of a command's own subcommands (runner
// explore merge): the command list leaves them to their command's line.
var subcommands = map[string]struct{ args, summary string }{
	"explore merge": {"--out DIR [--json F] [--markdown F] [--junit F] [--html-dir DIR] SHARD-DIR...",
		"put the outputs of runner explore --shard K/N (each shard's --out) together: the reports one unsharded run writes, the finding files in --out; exit 2 if a shard is missing, twice, or ran another build, system file, workload or numbering of the points"},
}

// usageOf is a command's or subcommand's usage.
func usageOf(name string) struct{ args, summary string } {
	if u, ok := subcommands[name]; ok {
		return u
	}
	return help[name]
}

// isMerge says whether explore's arguments are `merge DIR…`: a workload
// file is a YAML file, not a bare "merge".
func isMerge(args []string) bool { return len(args) > 0 && args[0] == "merge" }
