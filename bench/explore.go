package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/outboxdrill/runner/internal/pace"
)

// ExploreRun is one exploration of the reference system, as the explore
// section's Params.Explore runs it.
type ExploreRun struct {
	Points     int           // points run
	PointsTook time.Duration // their share of Took
	Took       time.Duration // the whole exploration: servers, the fault-free run, the points
	Mean       int           // points at once, on average while they ran
	Pace       string        // what the adaptive parallelism chose ("" when pinned)
}

// exploreFigure is an ExploreRun with the CPU its process tree used.
type exploreFigure struct {
	ExploreRun
	wall time.Duration
	cpu  time.Duration
}

func (f exploreFigure) rate() float64 { return float64(f.Points) / f.PointsTook.Seconds() }

// busy is the CPU the run's process tree (the runner, its servers, the
// services) kept busy, in percent of the machine's cores, over the wall.
func (f exploreFigure) busy() float64 {
	return 100 * f.cpu.Seconds() / f.wall.Seconds() / float64(runtime.NumCPU())
}

// benchExplore is the reference system explored at depth 1 with every
// default: at the default (adaptive) parallelism and at --parallel 2 (the
// former default on a 2-core machine), in turn, Repeat times; the median
// run of each by points/s.
func benchExplore(ctx context.Context, p Params, row func(what, figure, note string)) error {
	if p.Explore == nil {
		row("explore, reference system", "n/a", "no exploration given to the bench (runner bench gives it)")
		return nil
	}
	runs := map[int][]exploreFigure{}
	for range p.Repeat {
		for _, par := range []int{0, 2} {
			f, err := measureExplore(ctx, p, par)
			if err != nil {
				return err
			}
			runs[par] = append(runs[par], f)
		}
	}
	for _, par := range []int{0, 2} {
		f := medianBy(runs[par], exploreFigure.rate)
		what, how := "explore, reference system, depth 1, default parallelism", fmt.Sprintf("%s; %.0f%% CPU busy", f.Pace, f.busy())
		if par > 0 {
			what, how = fmt.Sprintf("explore, reference system, depth 1, --parallel %d", par), fmt.Sprintf("%.0f%% CPU busy", f.busy())
		}
		row(what, fmt.Sprintf("%.2f points/s", f.rate()), fmt.Sprintf("median of %d: %d points in %s on %d at once (%s in all); %s (the run's processes, of %d cores, over its wall)",
			len(runs[par]), f.Points, f.PointsTook.Round(100*time.Millisecond), f.Mean, f.Took.Round(100*time.Millisecond), how, runtime.NumCPU()))
	}
	return nil
}

// measureExplore runs one exploration and reads the CPU its process tree
// used meanwhile (from /proc: n/a elsewhere, as 0).
func measureExplore(ctx context.Context, p Params, parallel int) (exploreFigure, error) {
	s0, _ := pace.ReadProc(os.Getpid())
	start := time.Now()
	run, err := p.Explore(ctx, parallel)
	f := exploreFigure{ExploreRun: run, wall: time.Since(start)}
	s1, _ := pace.ReadProc(os.Getpid())
	f.cpu = s1.CPU - s0.CPU
	return f, err
}

// medianBy is the run whose key is the median.
func medianBy[T any](xs []T, key func(T) float64) T {
	s := append([]T(nil), xs...)
	for i := range s { // insertion sort: a few runs
		for j := i; j > 0 && key(s[j]) < key(s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}
