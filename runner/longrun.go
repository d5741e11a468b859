package runner

import (
	"context"
	"errors"

	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"
)

// RunLong runs scs as Run does, for scenarios of thousands of steps
// (runner soak --in-process's generated schedules): judged gets each
// result as soon as the history is judged, while its databases still
// exist, and each database pair is dropped after its scenario rather than
// reset row by row for the next one (which costs more than a new pair
// after a long scenario: ~95 s after 20,000 events). The session's other
// batches (Run) reuse their pairs as before.
func (s *Session) RunLong(ctx context.Context, scs []*scenario.Scenario, judged func(*report.Result)) (*report.Report, error) {
	p := s.p
	p.judged, p.discard = judged, true
	return (&Session{p: p, w: s.w, brokers: s.brokers}).Run(ctx, scs)
}

// Warm has the session's pools hold a database pair for each of scs (on
// the servers it will run on), created now, so that those scenarios start
// without a CREATE DATABASE: what a throughput figure should not count.
func (s *Session) Warm(ctx context.Context, scs []*scenario.Scenario) error {
	var isos []*world.Isolation
	var err error
	for _, sc := range scs {
		iso, aerr := s.w.Acquire(ctx, s.p.brokers()[0], sc)
		if aerr != nil {
			err = aerr
			break
		}
		isos = append(isos, iso)
	}
	for _, iso := range isos {
		err = errors.Join(err, s.w.Recycle(ctx, iso, false))
	}
	return err
}

// World is the session's world: its servers, for a tool that also drives
// them directly (the soak's raw baseline).
func (s *Session) World() *world.World { return s.w }
