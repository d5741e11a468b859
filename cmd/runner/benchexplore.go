package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/outboxdrill/runner/bench"
	"github.com/outboxdrill/runner/explore"
	"github.com/outboxdrill/runner/internal/outfile"
)

// benchExplorer is bench's explore section's run: the reference system
// (written to a directory of its own, as soak does), depth 1, the
// built-in workload, explore's defaults but --parallel when given (0:
// adaptive), on the bench's servers (pg, redis: "" the runner's own).
func benchExplorer(pg, redis string) func(ctx context.Context, parallel int) (bench.ExploreRun, error) {
	return func(ctx context.Context, parallel int) (bench.ExploreRun, error) {
		dir, err := os.MkdirTemp("", "runner-bench-explore-")
		if err != nil {
			return bench.ExploreRun{}, err
		}
		defer os.RemoveAll(dir)
		ref := filepath.Join(dir, "reference-system")
		if err := outfile.Dir(ref, 0o700); err != nil {
			return bench.ExploreRun{}, err
		}
		sys, err := writeReferenceSystem(ref)
		if err != nil {
			return bench.ExploreRun{}, err
		}
		args := []string{"--system", sys, "--out", filepath.Join(dir, "out")}
		if parallel > 0 {
			args = append(args, "--parallel", strconv.Itoa(parallel))
		}
		if pg != "" {
			args = append(args, "--pg", pg)
		}
		if redis != "" {
			args = append(args, "--redis", redis)
		}
		fs := newFlags("explore")
		f := defineExploreFlags(fs)
		if err := fs.Parse(args); err != nil {
			return bench.ExploreRun{}, err
		}
		var said strings.Builder
		w, ok := exploreInput(ctx, fs, f, nil, &said)
		if !ok {
			return bench.ExploreRun{}, fmt.Errorf("explore's input: %s", strings.TrimSpace(said.String()))
		}
		res, err := explore.Explore(ctx, f.p, w)
		if err != nil {
			return bench.ExploreRun{}, err
		}
		c := res.Counts()
		if res.Observed.Outcome != explore.Held || c[explore.Violated] > 0 || c[explore.NotJudged] > 0 {
			return bench.ExploreRun{}, errors.Join(bench.ErrScenariosFailed, fmt.Errorf("the reference system's exploration: %s, %d violation(s), %d not judged", res.Observed, c[explore.Violated], c[explore.NotJudged]))
		}
		return bench.ExploreRun{Points: res.Run(), PointsTook: res.Explore, Took: res.Took, Mean: res.Parallel, Pace: res.Pace}, nil
	}
}
