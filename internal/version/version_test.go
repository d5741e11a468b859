package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// The build's commit, whether it was modified, its time and the Go
// version are all named; a build without a recorded commit says so
// instead of inventing one.
func TestDescribe(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-06T07:00:00Z"}}}
	if got, want := describe(bi), "(devel) (0123456789ab, modified, 2026-12-06T07:00:00Z, go1.26.8)"; got != want {
		t.Errorf("describe = %q, want %q", got, want)
	}
	bi.Settings = nil
	if got := describe(bi); !strings.Contains(got, "commit not recorded") {
		t.Errorf("no commit: %q", got)
	}
	if !strings.HasPrefix(String(), "runner ") {
		t.Errorf("String() = %q", String())
	}
}
