package soak

import (
	"context"
	"fmt"
	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/ddmin"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
)

// Finding is one schedule's violation, its steps shrunk and written out.
type Finding struct {
	Schedule string   // the schedule's name
	Broken   []string // the invariants it broke
	Why      string   // the first violation
	// Steps were the schedule's, Kept what shrinking kept, in Runs runs
	// (Stopped: the budget ran out first).
	Steps, Kept, Runs int
	Stopped           bool
	File              string
	// Reproduced: the written file, loaded as runner run loads it, broke
	// it again.
	Reproduced bool
}

// findings shrinks each schedule that broke an invariant (within the
// budget, all of them together), writes it to Out and runs the written
// file once.
func (r *Report) findings(ctx context.Context, sess *runner.Session, scheds []schedule, results []*report.Result) error {
	deadline := time.Now().Add(r.Params.Budget)
	for k, res := range results {
		if len(res.Violations) == 0 {
			continue
		}
		f := Finding{Schedule: scheds[k].name, Why: firstLine(res.Violations[0].String()), Steps: len(scheds[k].steps),
			File: filepath.Join(r.Params.Out, scheds[k].file)}
		for _, v := range res.Violations {
			if !slices.Contains(f.Broken, v.Invariant) {
				f.Broken = append(f.Broken, v.Invariant)
			}
		}
		slices.Sort(f.Broken)
		kept, err := f.shrink(ctx, sess, scheds[k], deadline)
		if err != nil {
			return err
		}
		if err := f.write(r.Params, kept); err != nil {
			return err
		}
		if err := f.confirm(ctx, sess); err != nil {
			return err
		}
		r.Findings = append(r.Findings, f)
	}
	return nil
}

// shrink is ddmin (Zeller) over the schedule's steps: the smallest subset
// that still breaks the finding's invariants and no other (a drain left
// out would add stranded or lost). A round's candidates run a batch of
// the session's Parallel at a time, up to the first that holds.
func (f *Finding) shrink(ctx context.Context, sess *runner.Session, s schedule, deadline time.Time) ([]step, error) {
	c := s.steps
	for n := 2; len(c) >= 2 && time.Now().Before(deadline); {
		cands := ddmin.Candidates(c, n)
		i, err := f.firstHolding(ctx, sess, s, cands, deadline)
		if err != nil {
			return c, err
		}
		var done bool
		if c, n, done = ddmin.Next(c, cands, n, i); done {
			f.Kept = len(c)
			return c, nil
		}
	}
	f.Kept, f.Stopped = len(c), time.Now().After(deadline)
	return c, nil
}

// firstHolding runs cands in batches and returns the index of the first
// that breaks the finding's invariants (-1: none, or the budget ran out).
func (f *Finding) firstHolding(ctx context.Context, sess *runner.Session, s schedule, cands [][]step, deadline time.Time) (int, error) {
	batch := max(2, sess.Parallel())
	for lo := 0; lo < len(cands) && time.Now().Before(deadline); lo += batch {
		var scs []*scenario.Scenario
		for _, c := range cands[lo:min(lo+batch, len(cands))] {
			sc, err := parse(s.file, s.name, "", c)
			if err != nil {
				return -1, err
			}
			scs = append(scs, sc)
		}
		rep, err := sess.Run(ctx, scs)
		if err != nil {
			return -1, err
		}
		f.Runs += len(rep.Results)
		for _, res := range rep.Results {
			if f.holds(res) {
				return lo + slices.Index(scs, res.Scenario), nil
			}
		}
	}
	return -1, nil
}

// holds: res broke the finding's invariants, and no other.
func (f *Finding) holds(res *report.Result) bool {
	if verdictless(res) != nil || len(res.Violations) == 0 {
		return false
	}
	for _, v := range res.Violations {
		if !slices.Contains(f.Broken, v.Invariant) {
			return false
		}
	}
	return true
}

// write puts the shrunk schedule into the out directory, as a scenario
// that fails until the bug is fixed.
func (f *Finding) write(p Params, kept []step) error {
	comment := fmt.Sprintf("Found by %s\n(%s) and shrunk from %d to %d steps in %d runs.\nIt fails until the bug is fixed: runner run %s\nFirst seen: %s",
		p.command(), f.Schedule, f.Steps, f.Kept, f.Runs, f.File, f.Why)
	name := fmt.Sprintf("soak --in-process --seed %d breaks %s", p.Seed, strings.Join(f.Broken, ", "))
	if _, err := parse(f.File, name, comment, kept); err != nil {
		return err
	}
	return outfile.Write(f.File, render(name, comment, kept), 0o644) // a scenario for anyone to read
}

// confirm runs the written file, loaded as runner run loads it, once.
func (f *Finding) confirm(ctx context.Context, sess *runner.Session) error {
	scs, errs := scenario.LoadFilesContext(ctx, []string{f.File}, broker.Kinds())
	if len(errs) > 0 {
		return fmt.Errorf("the written %s does not load: %w", f.File, errs)
	}
	rep, err := sess.Run(ctx, scs)
	if err != nil {
		return err
	}
	f.Reproduced = len(rep.Results) == 1 && f.holds(rep.Results[0])
	return nil
}

// FormatFindings renders the findings for the console ("" for none).
func (r *Report) FormatFindings() string {
	var b strings.Builder
	for _, f := range r.Findings {
		shrunk := fmt.Sprintf("%d → %d steps in %d runs", f.Steps, f.Kept, f.Runs)
		if f.Stopped {
			shrunk += ", stopped by the budget"
		}
		again := "reproduces"
		if !f.Reproduced {
			again = "did NOT break again when run once: a verdict to doubt"
		}
		fmt.Fprintf(&b, "  finding      %s breaks %s (shrunk %s; the written file %s)\n", f.Schedule, strings.Join(f.Broken, ", "), shrunk, again)
		fmt.Fprintf(&b, "               runner run %s\n", safe.Line(f.File))
	}
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
