package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestValidateOfflineRefusesVarsExpansion: the doubling vars (a
// 637-byte file that took 25 s and 7.4 GB, and that validate --offline
// called valid) are an error at the variable past the bound, exit 2, at
// once; run refuses them the same way.
func TestValidateOfflineRefusesVarsExpansion(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: doubling\nvars:\n  v0: \"0123456789abcdef\"\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "  v%d: \"${v%d}${v%d}\"\n", i, i-1, i-1)
	}
	b.WriteString("steps:\n  - produce: {event: \"${v30}\"}\n")
	f := scenarioFile(t, "doubling.yaml", b.String())
	for _, args := range [][]string{{"validate", "--offline", f}, {"run", "--pg", "postgres://127.0.0.1:1/x", f}} {
		start := time.Now()
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, &out, &errb)
		if want := f + `:19:8: variable "v16" uses variables more than 16 deep`; code != exitInvalid || !strings.Contains(errb.String(), want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", args[0], code, errb.String(), want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%v took %v", args[0], took)
		}
	}
}
