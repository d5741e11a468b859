package main

import (
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/progress"
)

// run reports its progress on stderr (not a terminal here: a line per
// interval, set short, and one at the end); a bad interval is refused
// before anything runs.
func TestRunProgressOnStderr(t *testing.T) {
	t.Parallel()
	sc := scenarioFile(t, "slow.yaml", "name: slow\nsteps:\n  - produce\n  - sleep(for=1500ms)\n")
	code, stdout, stderr := cliEnv(t, []string{progress.EnvEvery + "=200ms"}, "run", sc)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "progress: 0/1 scenarios, 0 failed, ") || !strings.Contains(stderr, "progress: 1/1 scenarios, 0 failed, ") || !strings.HasSuffix(stderr, " (done)\n") {
		t.Errorf("want progress lines of the scenarios on stderr, the last one (done):\n%s", stderr)
	}
	if strings.Contains(stdout, "progress:") || strings.ContainsAny(stderr, "\r\x1b") {
		t.Errorf("progress on stdout, or control characters off a terminal:\n%s\n%q", stdout, stderr)
	}
	code, _, stderr = cliEnv(t, []string{progress.EnvEvery + "=soon"}, "run", sc)
	if code != exitInvalid || !strings.Contains(stderr, `RUNNER_PROGRESS_EVERY="soon": want a duration`) {
		t.Errorf("a bad %s: exit %d, want 2 naming it\n%s", progress.EnvEvery, code, stderr)
	}
}
