package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/steps"
)

// TestReadmeSaysWhatTheRunnerSays: the README's printed step list and the
// library's size are the runner's (both drifted once: five steps and a
// file were missing).
func TestReadmeSaysWhatTheRunnerSays(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if want := `unknown step "relya" (did you mean "relay"?); steps: ` + strings.Join(steps.Names(), ", ") + "\n"; !strings.Contains(readme, want) {
		t.Errorf("README's bad.yaml output lists other steps than the runner's; want:\n%s", want)
	}
	files, err := filepath.Glob("../../scenarios/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`cdc/` — (\\d+) files, ").FindStringSubmatch(readme)
	if m == nil || m[1] != strconv.Itoa(len(files)) {
		t.Errorf("README says the library has %v files; scenarios/ holds %d", m, len(files))
	}
}
