package main

import (
	"testing"

	"github.com/outboxdrill/runner/internal/lazy"
)

// Every regular expression, template and table the runner's packages build
// on first use (internal/lazy) builds: one that cannot compile fails here,
// where before it failed every start of the binary. This test binary links
// every package the runner does.
func TestLazyValuesBuild(t *testing.T) {
	n, err := lazy.Force()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no lazily built value registered: the runner's packages build theirs at start again, or Force sees none")
	}
	t.Logf("%d values built", n)
}
