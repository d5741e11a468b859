package scaffold

import (
	"context"
	"fmt"
	"github.com/outboxdrill/runner/broker"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/system"
)

// SystemFile is the file init writes in the out dir; its scenarios go in
// ScenarioDir beside it.
const (
	SystemFile  = "system.yaml"
	ScenarioDir = "scenarios"
)

// Files are the paths init writes, the system file first.
func (in *Init) Files() []string {
	out := []string{filepath.Join(in.out, SystemFile)}
	for _, s := range Starters(&Plan{Broker: in.p.Broker}) {
		out = append(out, filepath.Join(in.out, ScenarioDir, s.File))
	}
	return out
}

// Existing are the files init would write that are there already (an
// error unless --force).
func Existing(p Params) []string {
	in := &Init{p: p, out: p.Out}
	var out []string
	for _, f := range in.Files() {
		if _, err := os.Lstat(f); err == nil {
			out = append(out, f)
		}
	}
	return out
}

// Infer reads the catalogs, runs the probe and infers the plan. notes
// are what the user should know, a problem is an *InputError.
func (in *Init) Infer(ctx context.Context) (plan *Plan, notes []string, err error) {
	f, err := in.discover(ctx)
	if err != nil {
		return nil, nil, err
	}
	in.logf("catalogs: producer %s; consumer %s", strings.Join(tableNames(f.cats[0]), ", "), strings.Join(tableNames(f.cats[1]), ", "))
	in.logf("first reading: outbox %s (event id %s, payload %s, unpublished %s), inbox %s", f.outbox.Table.Ref(), f.eventID.Name, f.payload.Name, f.marker.Unpublished, f.inboxes[0].Table.Ref())
	sys, errs := system.Parse(in.hidden("probe-system"), in.provisional(f).Render(), broker.Kinds())
	if len(errs) > 0 {
		return nil, nil, &InputError{commandProblems(errs)}
	}
	if err := in.waitSession(); err != nil {
		return nil, nil, err
	}
	in.logf("probe: %s (%d %s) into %s, the relay and the consumer started behind the proxies on %s", probeName, probeAmount, probeCurrency, f.outbox.Table.Ref(), in.p.Broker)
	obs, err := in.probe(ctx, sys, f)
	if err != nil {
		return nil, nil, err
	}
	in.logf("probe: %s", settledSaid(obs.res))
	x := &inference{f: f, obs: obs, plan: in.basePlan(), broker: in.p.Broker}
	err = x.infer()
	in.brokersKey(x.plan, x.brokersComment)
	x.plan.order()
	in.header(x.plan, x.notes)
	if err == nil {
		if _, errs := system.Parse(filepath.Join(in.out, SystemFile), x.plan.Render(), broker.Kinds()); len(errs) > 0 {
			return nil, x.notes, fmt.Errorf("the system file init built does not load (a bug in init): %v\n%s", errs, x.plan.Render())
		}
	}
	return x.plan, x.notes, err
}

// commandProblems are the system file's load errors as problems of the
// commands init was given: that file is never written, so its
// positions are left out.
func commandProblems(errs diag.Errors) []string {
	var out []string
	for _, e := range errs {
		msg := e.Error()
		if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg[:i], ".init-") {
			msg = msg[i+2:]
		}
		out = append(out, "--relay/--consumer: "+msg)
	}
	return out
}

func settledSaid(res *report.Result) string {
	if res.Settled != "" {
		return "the system " + res.Settled
	}
	return "the run ended"
}

// Write writes the system file and the starter scenarios, each whole or
// not at all, never through a symlink.
func (in *Init) Write(plan *Plan) ([]string, error) {
	if err := outfile.Dir(filepath.Join(in.out, ScenarioDir), 0o755); err != nil {
		return nil, err
	}
	files := in.Files()
	texts := [][]byte{plan.Render()}
	for _, s := range Starters(plan) {
		texts = append(texts, []byte(s.Text))
	}
	for i, f := range files {
		if err := outfile.Write(f, texts[i], 0o644); err != nil {
			return files[:i], err
		}
	}
	return files, nil
}

// Drill runs the fault-free starter scenario with the written system
// file on init's servers, its result printed as run prints it.
func (in *Init) Drill(ctx context.Context) (*report.Report, error) {
	files := in.Files()
	sys, errs, err := system.Load(ctx, files[0], broker.Kinds())
	if err == nil && len(errs) == 0 {
		var scs []*scenario.Scenario
		scs, errs = scenario.LoadFilesContext(ctx, []string{filepath.Join(in.out, ScenarioDir, FaultFree)}, broker.Kinds())
		if len(errs) == 0 {
			for _, sc := range scs {
				errs = append(errs, sc.UseSystem(sys)...)
			}
		}
		if len(errs) == 0 {
			return in.session.Run(ctx, scs)
		}
	}
	if err != nil {
		return nil, err
	}
	return nil, errs
}
