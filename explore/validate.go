package explore

import (
	"context"
	"errors"
	"path/filepath"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"
)

// Check validates the workload on broker b exactly as `runner run` does a
// scenario before it starts anything: the fault-free workload, rendered and
// loaded as a file, its services' ${…} checked on b (Run's own check). A
// problem is said at the system file's line and column; explore starts no
// service then.
func (w *Workload) Check(ctx context.Context, out, b string) diag.Errors {
	file := filepath.Join(out, ".explore-check.yaml")
	scs, errs := scenario.ParseContext(ctx, file, w.Render(out, "explore check", "", Variant{}), broker.Kinds())
	if len(errs) > 0 {
		return errs
	}
	err := runner.PlaceholderProblems(scs, []string{b})
	var invalid *world.InvalidError
	if errors.As(err, &invalid) {
		return invalid.Errs
	}
	return nil
}
