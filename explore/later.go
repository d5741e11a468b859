package explore

import (
	"context"
	"io"
	"slices"

	"github.com/outboxdrill/runner/sysrun"
)

// Random configures --random.
type Random struct {
	Seed   uint64
	Faults float64
	Events int
}

// RandomResult is what a random run found.
type RandomResult struct {
	Finding *Finding
}

func (e *explorer) random(ctx context.Context, res *Result, xs []sysrun.Crossing) error { return nil }

func sortStrings(s []string) { slices.Sort(s) }

func (r *RandomResult) summary(w io.Writer) {}
