package explore

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/ddmin"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
)

// Finding is one violation, reduced and written out.
type Finding struct {
	Point  *Point   // the point (or random run) that found it first
	Also   []string // the other points that broke the same on the same boundary
	Broken []string
	Why    string
	// Minimal is the smallest schedule and workload that still breaks it.
	Minimal Variant
	Shrunk  string // what shrinking did: "3 → 1 event(s), 1 fault(s), 6 runs"
	// Shrink is the same as a record a program reads (the JSON report's
	// shrinking, beside shrunk's prose).
	Shrink Shrinking
	File   string
	// Reproduced of Tries runs of the written file broke it again.
	Reproduced, Tries int
}

// Shrinking is what shrinking a finding did: the counts before and after,
// and what it removed (explore's JSON report: shrinking).
type Shrinking struct {
	// NotShrunk says why it was not shrunk at all ("" when it was).
	NotShrunk    string `json:"not_shrunk,omitempty"`
	EventsBefore int    `json:"events_before"`
	EventsAfter  int    `json:"events_after"`
	FaultsBefore int    `json:"faults_before"`
	FaultsAfter  int    `json:"faults_after"`
	Runs         int    `json:"runs"`
	// StoppedByBudget: the budget ended shrinking before it was done.
	StoppedByBudget bool `json:"stopped_by_budget,omitempty"`
	// RemovedEvents are the workload's produce steps shrinking left out,
	// each at its file:line:col; RemovedFaults the faults it left out, as
	// SERVICE TRIGGER nth=N do=ACTION.
	RemovedEvents []string `json:"removed_events,omitempty"`
	RemovedFaults []string `json:"removed_faults,omitempty"`
}

// shrinkingOf is what shrinking from before to after in runs did on w.
func shrinkingOf(w *Workload, before, after Variant, runs int, stopped bool) Shrinking {
	s := Shrinking{EventsBefore: len(w.Events) - len(before.Drop), EventsAfter: len(w.Events) - len(after.Drop),
		FaultsBefore: len(before.Faults), FaultsAfter: len(after.Faults), Runs: runs, StoppedByBudget: stopped}
	for _, i := range w.Events {
		if after.Drop[i] && !before.Drop[i] && i < len(w.calls) {
			s.RemovedEvents = append(s.RemovedEvents, w.calls[i].Pos.String())
		}
	}
	for _, f := range before.Faults {
		if !slices.ContainsFunc(after.Faults, func(g Fault) bool { return g.String() == f.String() && g.Step == f.Step }) {
			s.RemovedFaults = append(s.RemovedFaults, w.serviceOf(f)+" "+f.String())
		}
	}
	return s
}

// findings groups the violations (one per service, boundary and
// invariants: the first point, lowest nth and first action, stands for the
// rest), shrinks each and writes it out.
func (e *explorer) findings(ctx context.Context, res *Result, start time.Time) error {
	byKey := map[string]*Finding{}
	for _, pt := range res.Points {
		if pt.Outcome != Violated {
			continue
		}
		key := strings.Join([]string{pt.Service, pt.where(), strings.Join(pt.Broken, ",")}, "|")
		if f := byKey[key]; f != nil {
			f.Also = append(f.Also, pt.String())
			continue
		}
		f := &Finding{Point: pt, Broken: pt.Broken, Why: pt.Why, Minimal: Variant{Faults: pt.Faults()}}
		byKey[key] = f
		res.Findings = append(res.Findings, f)
	}
	if res.Random != nil && res.Random.Finding != nil {
		res.Findings = append(res.Findings, res.Random.Finding)
	}
	// Findings of one service breaking the same invariants mostly need
	// the same events: the first one's shrunk workload is tried first.
	shrunk := map[string]*Variant{}
	for _, f := range res.Findings {
		key := ""
		if len(f.Minimal.Faults) == 1 {
			key = res.Workload.serviceOf(f.Minimal.Faults[0]) + "|" + strings.Join(f.Broken, ",")
		}
		if err := e.finish(ctx, res.Workload, f, start, shrunk[key]); err != nil {
			return err
		}
		if key != "" && shrunk[key] == nil && f.Reproduced == f.Tries {
			shrunk[key] = &f.Minimal
		}
	}
	return nil
}

// finish shrinks a finding (while the budget lasts) on its own, over
// its events and faults, leaves out the checks its shrunk workload no
// longer holds without a fault, writes it and confirms the written file.
// like (the events a like finding's shrinking kept) is only where
// shrinking starts, when it still breaks there.
func (e *explorer) finish(ctx context.Context, w *Workload, f *Finding, start time.Time, like *Variant) error {
	deadline := start.Add(e.p.Budget)
	before := f.Minimal
	if time.Now().Before(deadline) {
		from, err := e.startFrom(ctx, w, f, like)
		if err != nil {
			return err
		}
		v, runs, err := e.shrink(ctx, w, from, f.Broken, shrinkLabel(w, f), deadline)
		if err != nil {
			return err
		}
		f.Minimal = v
		f.Shrink = shrinkingOf(w, before, v, runs, time.Now().After(deadline))
		f.Shrunk = fmt.Sprintf("%d → %d event(s), %d → %d fault(s), %d run(s)", len(w.Events)-len(before.Drop), len(w.Events)-len(v.Drop), len(before.Faults), len(v.Faults), runs)
		if f.Shrink.StoppedByBudget {
			f.Shrunk += "; stopped by the budget"
		}
	} else {
		f.Shrunk = "not shrunk: the budget ran out"
		f.Shrink = Shrinking{NotShrunk: "the budget ran out", EventsBefore: len(w.Events) - len(before.Drop), FaultsBefore: len(before.Faults)}
		f.Shrink.EventsAfter, f.Shrink.FaultsAfter = f.Shrink.EventsBefore, f.Shrink.FaultsBefore
	}
	var err error
	if f.Minimal, err = e.uncheck(ctx, w, f.Minimal, f.Broken); err != nil {
		return err
	}
	if err := e.write(w, f); err != nil {
		return err
	}
	if err := e.confirm(ctx, f); err != nil {
		return err
	}
	if f.Reproduced > 0 && f.Reproduced < f.Tries { // its header says how flaky
		if err := e.write(w, f); err != nil {
			return err
		}
	}
	return e.unconfirmed(w, f)
}

// startFrom is where shrinking starts: the events a like finding kept
// when they still break the finding's invariants (one run), else all of
// the finding's.
func (e *explorer) startFrom(ctx context.Context, w *Workload, f *Finding, like *Variant) (Variant, error) {
	if like == nil {
		return f.Minimal, nil
	}
	try := f.Minimal
	try.Drop = like.Drop
	outs, err := e.run(ctx, w, []Variant{try}, "shrink")
	if err != nil || len(outs) == 0 || !outs[0].same(f.Broken) {
		return f.Minimal, err
	}
	return try, nil
}

// uncheck leaves out of v the workload checks its events, without any
// fault, do not hold: a count that scales with the events (inbox.rows: 3
// with one event left) would fail once the bug is fixed, too. One run of
// v's events alone says which; the checks shrinking saw fail stay out.
func (e *explorer) uncheck(ctx context.Context, w *Workload, v Variant, broken []string) (Variant, error) {
	if len(v.Drop) == 0 {
		return v, nil // the whole workload: it held without a fault
	}
	outs, err := e.run(ctx, w, []Variant{{Drop: v.Drop}}, "checks")
	if err != nil || len(outs) == 0 {
		return v, err
	}
	v.Unchecked = slices.Clone(v.Unchecked)
	for _, k := range staleChecks(outs[0].Broken, nil) {
		if !slices.Contains(v.Unchecked, k) && !slices.Contains(broken, "check "+k) { // a check-only finding keeps its own
			v.Unchecked = append(v.Unchecked, k)
		}
	}
	return v, nil
}

// unconfirmedExt is the file name ending of a finding whose written
// scenario never broke again: not a .yaml, so `runner run DIR` does not
// take it for a failing regression scenario it would pass.
const unconfirmedExt = ".yaml.unconfirmed"

// unconfirmed sets aside a written finding that broke nothing in any of
// its confirming runs: the file would claim to fail until a bug is fixed,
// and pass. It is kept, under unconfirmedExt, saying so.
func (e *explorer) unconfirmed(w *Workload, f *Finding) error {
	if f.Tries == 0 || f.Reproduced > 0 {
		return nil
	}
	old := f.File
	f.File = strings.TrimSuffix(old, ".yaml") + unconfirmedExt
	title := fmt.Sprintf("explore (unconfirmed): %s broke %s once", faultList(w, f.Minimal.Faults), strings.Join(f.Broken, ", "))
	comment := fmt.Sprintf("Found by runner explore on %s (workload: %s).\n%s\nUNCONFIRMED: this schedule broke it once, then not in %d runs of this file; a window its timing rarely hits, or a verdict to doubt.\nRun it again: runner run %s\nFirst seen: %s",
		w.System.File, w.Name, faultWords(w, f.Minimal.Faults), f.Tries, f.File, f.Why)
	if err := outfile.Write(f.File, w.Render(e.p.Out, title, comment, e.written(f.Minimal)), 0o644); err != nil { // a scenario for anyone to read
		return err
	}
	return os.Remove(old)
}

// element is what shrinking may leave out: an event step or a fault.
type element struct {
	event int // the workload step, when fault is nil
	fault *Fault
}

// shrink is ddmin (Zeller) over the variant's events and faults: the
// smallest subset that still breaks one of the invariants. Each round's
// candidates run as one batch. A finding that is only a workload check
// keeps its events: with fewer, a count the check reads changes anyway.
func (e *explorer) shrink(ctx context.Context, w *Workload, v Variant, broken []string, label string, deadline time.Time) (Variant, int, error) {
	var keep map[int]bool // a check-only finding's events: all it had
	if len(invariants(broken)) == 0 {
		keep = maps.Clone(v.Drop)
		if keep == nil {
			keep = map[int]bool{}
		}
	}
	var c []element
	for _, i := range w.Events {
		if !v.Drop[i] && keep == nil {
			c = append(c, element{event: i})
		}
	}
	var stale []string // of the last candidate taken
	shrunk := func(c []element) Variant {
		out := variantOf(w, c, keep)
		out.Unchecked = stale
		return out
	}
	for i := range v.Faults {
		c = append(c, element{fault: &v.Faults[i]})
	}
	runs := 0
	for n, round := 2, 1; len(c) >= 2 && time.Now().Before(deadline); round++ {
		// A round of a slow service runs for minutes: say what it is at.
		events, faults := countElements(c, keep, w)
		e.logf("shrinking %s: %d events, %d faults, round %d", label, events, faults, round)
		cands := ddmin.Candidates(c, n)
		vs := make([]Variant, len(cands))
		for i, cand := range cands {
			vs[i] = variantOf(w, cand, keep)
		}
		outs, err := e.run(ctx, w, vs, "shrink")
		if err != nil {
			return v, runs, err
		}
		runs += len(outs)
		i := slices.IndexFunc(outs, func(o outcome) bool { return o.same(broken) })
		if i >= 0 {
			stale = staleChecks(outs[i].Broken, broken)
		}
		var done bool
		if c, n, done = ddmin.Next(c, cands, n, i); done {
			return shrunk(c), runs, nil
		}
	}
	return shrunk(c), runs, nil
}

// shrinkLabel names a finding in shrinking's progress lines.
func shrinkLabel(w *Workload, f *Finding) string {
	return faultList(w, f.Minimal.Faults) + " breaks " + strings.Join(f.Broken, ", ")
}

// countElements are the events and faults of c; a check-only finding's
// events (keep) are all it kept, not among c.
func countElements(c []element, keep map[int]bool, w *Workload) (events, faults int) {
	for _, el := range c {
		if el.fault != nil {
			faults++
		} else {
			events++
		}
	}
	if keep != nil {
		events = len(w.Events) - len(keep)
	}
	return events, faults
}

// staleChecks are the workload checks a shrunk run broke that the
// finding's own run did not: broken by the events left out.
func staleChecks(got, finding []string) []string {
	var out []string
	for _, b := range got {
		if k, ok := strings.CutPrefix(b, "check "); ok && !slices.Contains(finding, b) {
			out = append(out, k)
		}
	}
	return out
}

// variantOf keeps the elements of c: the other events are dropped, or,
// with keep (a check-only finding's, whose events shrinking leaves alone),
// the events keep drops.
func variantOf(w *Workload, c []element, keep map[int]bool) Variant {
	v := Variant{Drop: map[int]bool{}}
	if keep != nil {
		v.Drop = maps.Clone(keep)
		for _, el := range c {
			v.Faults = append(v.Faults, *el.fault)
		}
		return v
	}
	for _, i := range w.Events {
		v.Drop[i] = true
	}
	for _, el := range c {
		if el.fault != nil {
			v.Faults = append(v.Faults, *el.fault)
		} else {
			delete(v.Drop, el.event)
		}
	}
	w.tie(v.Drop)
	v.Faults = unpaired(v.Faults)
	return v
}

// unpaired is fs with the second faults whose first shrinking left out
// made whole: an also: alone is that fault from the process's start (it
// counted from there), a then: alone is nothing (no first fault restarts
// the process it waits for). A start step takes neither without fault:.
func unpaired(fs []Fault) []Fault {
	var out []Fault
	for _, f := range fs {
		first := slices.ContainsFunc(fs, func(g Fault) bool { return g.Where == "" && g.Step == f.Step })
		switch {
		case first || f.Where == "" || f.Where == "step":
		case f.Where == "also":
			f.Where = ""
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}

var unsafeName = lazy.Regexp(`[^a-z0-9]+`)

// write puts the finding's minimal scenario into the out directory.
func (e *explorer) write(w *Workload, f *Finding) error {
	name := "explore"
	if len(f.Minimal.Faults) > 0 {
		ft := f.Minimal.Faults[0]
		name = fmt.Sprintf("%s %s %d %s", w.serviceOf(ft), ft.On.On(), ft.Nth, ft.Do)
	}
	name = strings.Trim(unsafeName().ReplaceAllString(strings.ToLower(name+" "+strings.Join(f.Broken, " ")), "-"), "-")
	f.File = filepath.Join(e.p.Out, name+".yaml")
	if e.wrote == nil {
		e.wrote = map[string]*Finding{}
	}
	for k := 2; e.wrote[f.File] != nil && e.wrote[f.File] != f; k++ { // two findings shrunk alike: each its own file
		f.File = filepath.Join(e.p.Out, fmt.Sprintf("%s-%d.yaml", name, k))
	}
	e.wrote[f.File] = f
	title := fmt.Sprintf("explore: %s breaks %s", faultList(w, f.Minimal.Faults), strings.Join(f.Broken, ", "))
	comment := fmt.Sprintf("Found by runner explore on %s (workload: %s).\n%s\n%sIt fails until the bug is fixed: runner run %s\nFirst seen: %s",
		w.System.File, w.Name, faultWords(w, f.Minimal.Faults), flakyLine(f), f.File, f.Why)
	return outfile.Write(f.File, w.Render(e.p.Out, title, comment, e.written(f.Minimal)), 0o644) // a scenario for anyone to read
}

// flakyLine is a flaky finding's header line: its rate when written and
// how to measure it again (runner run has no repeat flag: a shell loop
// counts the runs that exit 1), "" for any other.
func flakyLine(f *Finding) string {
	if f.Reproduced == 0 || f.Reproduced == f.Tries {
		return ""
	}
	return fmt.Sprintf("FLAKY: reproduced %d/%d when written: a window its timing does not always hit; CI may pass it with the bug still there.\n"+
		"Re-measure: for i in $(seq 10); do runner run %s >/dev/null; echo $?; done | sort | uniq -c   (exit 1: reproduced)\n", f.Reproduced, f.Tries, f.File)
}

// confirm runs the written file, as `runner run` loads it, Confirm times.
func (e *explorer) confirm(ctx context.Context, f *Finding) error {
	if e.p.Confirm < 1 {
		return nil
	}
	var scs []*scenario.Scenario
	for range e.p.Confirm {
		loaded, errs := scenario.LoadFilesContext(ctx, []string{f.File}, broker.Kinds())
		if len(errs) > 0 {
			return fmt.Errorf("explore: the written %s does not load (a bug in explore): %v", f.File, errs)
		}
		scs = append(scs, loaded...)
	}
	outs, err := e.runScenarios(ctx, scs)
	if err != nil {
		return err
	}
	f.Tries = len(outs)
	for _, o := range outs {
		if o.same(f.Broken) {
			f.Reproduced++
		}
	}
	return nil
}

// Reproduces says how often the written file broke it again.
func (f *Finding) Reproduces() string {
	switch {
	case f.Tries == 0:
		return "not confirmed"
	case f.Reproduced == f.Tries:
		return fmt.Sprintf("reproduces %d/%d", f.Reproduced, f.Tries)
	case f.Reproduced == 0:
		return fmt.Sprintf("did not break again in %d runs: unconfirmed", f.Tries)
	}
	return fmt.Sprintf("flaky %d/%d", f.Reproduced, f.Tries)
}

// faultList names a schedule: its first three faults, and how many more.
func faultList(w *Workload, fs []Fault) string {
	if len(fs) == 0 {
		return "the workload without a fault"
	}
	var parts []string
	for i, f := range fs {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more fault(s)", len(fs)-3))
			break
		}
		parts = append(parts, w.serviceOf(f)+" "+f.String())
	}
	return strings.Join(parts, " + ")
}

// faultWords says what each fault does, in the proxies' terms, one a line.
func faultWords(w *Workload, fs []Fault) string {
	var lines []string
	for _, f := range fs {
		lines = append(lines, fmt.Sprintf("%s: %s %s", w.serviceOf(f), f.String(), actionWords(f)))
	}
	return strings.Join(lines, "\n")
}

func actionWords(f Fault) string {
	onBroker := f.On.Link == fault.Broker
	request := onBroker && f.On.Boundary == fault.Request
	delivery := onBroker && f.On.Boundary == fault.Reply && f.On.Filter.Command == fault.OpDeliver
	neutral := onBroker && fault.NeutralOp(f.On.Filter.Command)
	switch {
	case f.Do == "kill" && request:
		return "— killed before the command reached the broker, then restarted by its supervisor"
	case f.Do == "kill" && delivery:
		return "— the broker handed it out, the delivery was held and the service killed, then restarted by its supervisor"
	case f.Do == "kill" && neutral:
		return "— the broker took it, its answer was held and the service killed, then restarted by its supervisor"
	case f.Do == "kill" && onBroker:
		return "— Redis ran it, the reply was held and the service killed, then restarted by its supervisor"
	case f.Do == "kill":
		return "— the server did it, the reply was held and the service killed, then restarted by its supervisor"
	case f.Do == "cut":
		return "— its connection closed instead of the reply"
	case f.Do == "error" && delivery:
		return "— the delivery kept from the service, an error instead"
	case f.Do == "error" && neutral:
		return "— not sent to the broker, an error answer instead"
	case f.Do == "error" && onBroker:
		return "— the command not sent, an error reply instead"
	case f.Do == "error":
		return "— the transaction really rolled back, the client got SQLSTATE 40001"
	}
	return "— the reply held that long"
}

// written is v as a finding's file holds it: its faults optional, so
// that it fails until the bug is fixed and passes after, also when the
// fixed service no longer crosses a boundary the schedule names; pinned to
// the broker and settle explore ran with, and not judging what explore
// itself could not judge at its faults, so that `runner run FILE` alone
// runs it as explore did.
func (e *explorer) written(v Variant) Variant {
	v.Optional = true
	if len(e.p.Runner.Brokers) > 0 {
		v.Pin.Broker = e.p.Runner.Brokers[0]
	}
	if e.p.Runner.Settle != 0 && e.p.Runner.Settle != runner.DefaultSettle {
		v.Pin.Settle = e.p.Runner.Settle.String()
	}
	if pipelined(v.Faults) != "" {
		v.Pin.NotJudged = []string{history.DoublePublished} // pipelineCaveat
	}
	return v
}
