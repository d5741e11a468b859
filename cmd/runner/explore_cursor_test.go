package main

import (
	"os"
	"strings"
	"testing"
)

// exploreFaultFree runs explore on the Python example with its built-in
// workload and no point (--only matches none): the fault-free run alone,
// what a relay that skips a row committed out of id order already fails.
func exploreFaultFree(t *testing.T, bug, out string) (int, string, string) {
	t.Helper()
	return cliEnv(t, []string{"BUG=" + bug}, "explore", "--system", "../../examples/python/system.yaml", "--out", out,
		"--only", "^NO POINT$", "--confirm", "1")
}

// The watermill#311 shape: a relay that reads WHERE seq > the last seq it
// published never publishes the row whose transaction committed after a
// higher seq was published. The built-in workload commits such a pair;
// explore must find the skipped row (stuck) with nothing written by hand,
// write a file that fails on that relay and passes on the correct one, and
// hold on the correct relay.
func TestExploreBuiltinWorkloadFindsACursorRelaysSkippedRow(t *testing.T) {
	t.Parallel()
	if !pythonReady(t) {
		t.Skip("/usr/bin/python3 lacks psycopg2 or redis: apt-get install python3-psycopg2 python3-redis")
	}
	t.Run("BUG=cursor", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		code, stdout, stderr := exploreFaultFree(t, "cursor", out)
		if code != exitFailed || !strings.Contains(stdout, "the workload does not hold without any fault") || !strings.Contains(stdout, "stuck") {
			t.Fatalf("BUG=cursor: exit %d, want 1 with the fault-free run stuck\n%s\n%s", code, stdout, stderr)
		}
		files := yamlFiles(t, out)
		if len(files) != 1 {
			t.Fatalf("wrote %v, want one scenario\n%s", files, stdout)
		}
		body, _ := os.ReadFile(files[0])
		if !strings.Contains(string(body), "produce_overlapping:") {
			t.Errorf("the shrunk scenario lost the out-of-order commit:\n%s", body)
		}
		if code, stdout, stderr = cliEnv(t, []string{"BUG=cursor"}, "run", files[0]); code != exitFailed || !strings.Contains(stdout, "stuck") {
			t.Errorf("runner run %s on the cursor relay: exit %d, want 1 naming stuck\n%s\n%s", files[0], code, stdout, stderr)
		}
		if code, stdout, stderr = cliEnv(t, []string{"BUG="}, "run", files[0]); code != exitOK {
			t.Errorf("runner run %s on the correct relay: exit %d, want 0\n%s\n%s", files[0], code, stdout, stderr)
		}
	})
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		code, stdout, stderr := exploreFaultFree(t, "", out)
		if code != exitOK || !strings.Contains(stdout, "observe: the fault-free run: held") {
			t.Fatalf("the correct relay: exit %d, want 0 with the fault-free run held\n%s\n%s", code, stdout, stderr)
		}
		if files := yamlFiles(t, out); len(files) != 0 {
			t.Errorf("the correct relay: wrote %v, want nothing", files)
		}
	})
}
