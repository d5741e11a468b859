package runner

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the generated files the tests compare with (the golden
// files of docs/) instead of failing when they are stale:
//
//	go test ./runner/ -run 'Docs|Schema|Guarantees' -update
var update = flag.Bool("update", false, "rewrite the generated docs/ files (scenario-language.md, scenario.schema.json, broker-guarantees.md) instead of failing when they are stale")

// golden compares got with the repository file path (relative to the module
// root, e.g. "docs/scenario.schema.json"). Stale: with -update the file is
// rewritten, else the test fails with a diff and how to regenerate it.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	file := "../" + path
	want, err := os.ReadFile(file)
	if err == nil && bytes.Equal(want, got) {
		return
	}
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatalf("-update: %v", err)
		}
		t.Logf("-update: rewrote %s", path)
		return
	}
	if err != nil {
		t.Errorf("%s: %v: run go test ./runner/ -update", path, err)
		return
	}
	t.Errorf("%s is out of date (-file +generated):\n%s\nrun go test ./runner/ -update", path,
		cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")))
}
