package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/report/htmlreport"
	"github.com/outboxdrill/runner/runner"
)

// htmlFlag is run's --html FILE.
func htmlFlag(fs *flag.FlagSet) *string {
	return fs.String("html", "", "write one self-contained HTML report to `FILE`: a summary, the broker matrix as a grid, each scenario's swim-lane timeline of the wire with its fault and violations, a replay command per failure")
}

// checkHTMLPath refuses, before anything runs, an HTML report path the
// run could not write: a directory that is not there, a symlink, a name
// that is not a regular file (outfile.Write refuses the same at the end).
func checkHTMLPath(path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return fmt.Errorf("report: --html %s: its directory is not there", path)
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("report: --html: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("report: --html %s is a symbolic link: refusing to write through it", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("report: --html %s is not a regular file", path)
	}
	return nil
}

// writeHTML writes rep to path, whole or not at all (internal/outfile).
// The replay commands carry the flags of the run that change what a
// scenario does; the run's server URLs never (their secrets are hidden
// from every string of the file).
func writeHTML(path string, rep *report.Report, set *flag.FlagSet, p *runner.Params) error {
	if path == "" || rep == nil {
		return nil
	}
	var replay []string
	set.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "settle", "timeout", "system", "repeat": // a flaky failure replays as often as it was hunted
			replay = append(replay, "--"+f.Name, f.Value.String())
		}
	})
	urls := append([]string{p.PGURL}, slices.Collect(maps.Values(p.URLs))...)
	data, err := htmlreport.Render(rep, htmlreport.Options{Replay: replay, Hide: redact.NewSet(redact.URLSecrets(urls...)...)})
	if err != nil {
		return fmt.Errorf("report %s: %w", path, err)
	}
	return outfile.Write(path, data, 0o644)
}
