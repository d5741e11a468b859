package runner

import (
	"context"
	"errors"

	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
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
	return (&Session{p: p, w: s.w}).Run(ctx, scs)
}

// OpenSessionFor is OpenSession for the scenarios scs to come: when one of
// them crashes a PostgreSQL (producer_db, consumer_db), the runner's own
// servers are split as Run splits them, a server per side for those
// scenarios, so that a crash is one side's.
func OpenSessionFor(ctx context.Context, p Params, scs []*scenario.Scenario) (*Session, error) {
	sh := shape{brokers: p.brokers()}
	for _, sc := range scs {
		sh.splitDBs = sh.splitDBs || sc.DBFaults
	}
	return openSession(ctx, p, sh)
}

// Warm has the session's pools hold a database pair for each of scs (on
// the servers it will run on), created now, so that those scenarios start
// without a CREATE DATABASE: what a throughput figure should not count.
func (s *Session) Warm(ctx context.Context, scs []*scenario.Scenario) error {
	var isos []*isolation
	var err error
	for _, sc := range scs {
		iso, aerr := s.w.acquire(ctx, s.p.brokers()[0], sc)
		if aerr != nil {
			err = aerr
			break
		}
		isos = append(isos, iso)
	}
	for _, iso := range isos {
		err = errors.Join(err, s.w.recycle(ctx, iso, false))
	}
	return err
}

// World is the session's world: its servers, for a tool that also drives
// them directly (the soak's raw baseline).
func (s *Session) World() *World { return s.w }

// BrokerURL is broker b's server URL, given or the runner's own ("" when
// b is not one of the world's brokers).
func (w *World) BrokerURL(b string) string { return w.brokerURL(b) }

// discard ends a scenario's use of a pair nobody takes next: its broker
// stream is deleted and its databases dropped (on the runner's own server,
// left to go with the server). The pool may create a new pair in its place.
func (w *World) discard(ctx context.Context, iso *isolation) error {
	if !iso.own {
		pp := &w.pairs[iso.set]
		pp.mu.Lock()
		pp.pairs--
		pp.mu.Unlock()
	}
	err := iso.env.Broker.Delete(context.WithoutCancel(ctx))
	return errors.Join(err, iso.release(false))
}
