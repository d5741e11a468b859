// Package version says which build of the runner is running: what a bug
// report, a CI artifact and a report file need to name.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// String is "runner <module version> (<revision>[, modified], <commit time>, <go version>)",
// read from the build's own information: a `go build` in a git checkout
// records the commit; `go run` and test binaries may not, and say so.
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "runner (no build information)"
	}
	return "runner " + describe(bi)
}

func describe(bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	parts := []string{}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if settings["vcs.modified"] == "true" {
			rev += ", modified"
		}
		parts = append(parts, rev)
		if t := settings["vcs.time"]; t != "" {
			parts = append(parts, t)
		}
	} else {
		parts = append(parts, "commit not recorded")
	}
	parts = append(parts, bi.GoVersion)
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("%s (%s)", v, strings.Join(parts, ", "))
}
