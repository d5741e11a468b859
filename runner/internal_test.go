package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/report"
)

// A panic in a scenario's worker is an *InternalError with its stack, not
// the end of the process (which exited 2, the code of an invalid scenario,
// and left the run's servers behind).
func TestPanicInAWorkerIsAnInternalError(t *testing.T) {
	res, err := guarded(func() (*report.Result, error) {
		var steps []int
		_ = steps[3] // index out of range
		return &report.Result{}, nil
	})
	var internal *InternalError
	if res != nil || !errors.As(err, &internal) {
		t.Fatalf("res %v, err %v; want an *InternalError", res, err)
	}
	if want := "internal error: panic: runtime error: index out of range [3] with length 0"; err.Error() != want {
		t.Errorf("err %q, want %q", err, want)
	}
	if !strings.Contains(string(internal.Stack), "TestPanicInAWorkerIsAnInternalError") {
		t.Errorf("the stack does not show where it panicked:\n%s", internal.Stack)
	}
	if res, err := guarded(func() (*report.Result, error) { return &report.Result{Skipped: "x"}, nil }); err != nil || res.Skipped != "x" {
		t.Errorf("no panic: %v, %v", res, err)
	}
}
