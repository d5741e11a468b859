package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runner --version and runner version name the build and exit 0; an
// argument after it is a usage error (2), as for every command.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), args, &out, &errOut); code != exitOK || !strings.HasPrefix(out.String(), "runner ") || !strings.Contains(out.String(), "go1.") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"version", "extra"}, &out, &errOut); code != exitInvalid {
		t.Errorf("version extra: exit %d, want %d", code, exitInvalid)
	}
}
