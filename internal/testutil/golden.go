package testutil

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the generated files the tests compare with (the golden
// files of docs/) instead of failing when they are stale, as datadriven's
// -rewrite does:
//
//	go test ./scenario/ -run 'Docs|Schema' -update
//	go test ./runner/ -run Guarantees -update
//	go test ./internal/layout -run TestReadmeLayoutUpToDate -update
var update = flag.Bool("update", false, "rewrite the generated docs/ files instead of failing when they are stale")

// Golden compares got with the repository file path (relative to the module
// root, e.g. "docs/scenario.schema.json"). Stale: with -update the file is
// rewritten, else the test fails with a diff and the command that
// regenerates it.
func Golden(t *testing.T, path string, got []byte) {
	t.Helper()
	file := filepath.Join(moduleRoot(), path)
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
	hint := "go test ./" + packageDir() + " -run '" + t.Name() + "' -update"
	if err != nil {
		t.Errorf("%s: %v: run %s", path, err, hint)
		return
	}
	t.Errorf("%s is out of date (-file +generated):\n%s\nrun %s", path,
		cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")), hint)
}

// packageDir is the test's package directory (its working directory)
// relative to the module root, slash-separated: the hint names the exact
// package, internal/layout as well as scenario.
func packageDir() string {
	pkg, _ := os.Getwd()
	rel, err := filepath.Rel(moduleRoot(), pkg)
	if err != nil {
		return filepath.Base(pkg)
	}
	return filepath.ToSlash(rel)
}

// moduleRoot is the repository's root: two levels above this file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
