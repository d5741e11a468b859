// Package explore finds the fault windows of a team's relay and consumer
// that nobody wrote a scenario for: it runs a fault-free workload once
// through the protocol proxies and records every boundary each service
// crossed (the boundary map), then runs the workload again, in isolation,
// with one fault at each (service, boundary, nth, action) point and a
// supervisor that restarts what the fault killed, judges each run after it
// settled, and reduces every violation to a minimal scenario file that
// `runner run` fails on. docs/explore.md describes it.
package explore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/guardfile"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/system"
)

// Workload is the fault-free scenario every point runs, kept as its YAML
// so that a point's scenario is the workload with one start step changed,
// and the file written for a violation is exactly what ran.
type Workload struct {
	File   string // the workload file; "" for the built-in one
	Name   string
	System *system.System
	root   *yaml.Node   // the scenario's mapping
	steps  []*yaml.Node // its steps, as written
	calls  []*steps.Call
	// Starts are the indexes of its start steps, Events those of its
	// produce steps (what shrinking may leave out).
	Starts, Events []int
	// resends maps a publish step that re-sends an event the workload
	// produces to the step that produced it: without that step, the
	// re-send is a copy of nothing, which every consumer applies as a
	// phantom (tie).
	resends map[int]int
}

// Service is the service a start step starts.
func (w *Workload) Service(step int) string {
	return w.calls[step].Params.(*steps.StartParams).Service
}

// serviceOf is the service a fault strikes.
func (w *Workload) serviceOf(f Fault) string {
	if f.Where == "step" || f.Service != "" { // a merged result's faults say it: its workload is a name only
		return f.Service
	}
	return w.Service(f.Step)
}

// StartPos is where the workload's start step is.
func (w *Workload) StartPos(step int) diag.Pos { return w.calls[step].Pos }

// LoadWorkload reads a workload file: one fault-free scenario of a team's
// system (sys, when given, is --system; else its system: key names it).
func LoadWorkload(ctx context.Context, file string, sys *system.System) (*Workload, diag.Errors) {
	// As every file the runner reads: a regular file within its size cap,
	// read under ctx (a FIFO hung explore past every signal).
	data, err := guardfile.Read(ctx, file, guardfile.Scenario)
	if err != nil {
		return nil, diag.Errors{diag.Errorf(diag.Pos{File: file}, "%v", err)}
	}
	return parseWorkload(ctx, file, data, sys)
}

func parseWorkload(ctx context.Context, file string, data []byte, sys *system.System) (*Workload, diag.Errors) {
	scs, errs := scenario.ParseContext(ctx, file, data, broker.Kinds())
	if len(errs) > 0 {
		return nil, errs
	}
	at := diag.Pos{File: file, Line: 1, Col: 1}
	if len(scs) != 1 {
		return nil, diag.Errors{diag.Errorf(at, "a workload is one scenario, not a matrix of %d variants (explore varies the faults itself)", len(scs))}
	}
	sc := scs[0]
	if errs := sc.UseSystem(sys); len(errs) > 0 {
		return nil, errs
	}
	if sc.System == nil {
		return nil, diag.Errors{diag.Errorf(sc.Pos, "the workload drills no system: give --system FILE or a system: key (explore runs a team's services)")}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, diag.Errors{diag.Errorf(at, "not YAML: %v", err)}
	}
	w := &Workload{File: file, Name: sc.Name, System: sc.System, root: doc.Content[0], calls: sc.Steps}
	if n := valueOf(w.root, "steps"); n != nil {
		w.steps = n.Content
	}
	if len(w.steps) != len(sc.Steps) {
		return nil, diag.Errors{diag.Errorf(sc.Pos, "the workload's steps could not be told apart (aliases or merge keys): write them out")}
	}
	return w, w.index()
}

// index finds the start and produce steps and refuses faults and
// expected violations: the workload is what holds without a fault.
func (w *Workload) index() diag.Errors {
	var errs diag.Errors
	if valueOf(w.root, "expect_violations") != nil {
		errs = append(errs, diag.Errorf(diag.NodePos(w.File, keyOf(w.root, "expect_violations")), "expect_violations: a workload declares no violation: it must hold without faults (explore finds what breaks)"))
	}
	for i, c := range w.calls {
		switch c.Def.Name {
		case "start":
			p := c.Params.(*steps.StartParams)
			if p.Fault != nil {
				errs = append(errs, diag.Errorf(c.Pos, "start: the workload arms no fault (explore arms one per point); remove fault:"))
			}
			if g := w.System.Groups[p.Service]; len(g) > 0 {
				// A point arms its fault on a start step, and a fault
				// strikes one process.
				errs = append(errs, diag.Errorf(c.Pos, "start: %s starts %d replicas: a workload starts each with a step of its own (start: %s), so that a point can fault one", p.Service, len(g), strings.Join(g, ", start: ")))
			}
			w.Starts = append(w.Starts, i)
		case "produce", "publish", "produce_overlapping":
			w.Events = append(w.Events, i)
		case "kill", "stop":
			errs = append(errs, diag.Errorf(c.Pos, "%s: a workload ends no service itself (explore's faults do, and its supervisor restarts them)", c.Def.Name))
		}
		if len(c.Faults()) > 0 && c.Def.Name != "start" {
			errs = append(errs, diag.Errorf(c.Pos, "%s: the workload injects no fault (%s); explore arms one per point", c.Def.Name, strings.Join(c.Faults(), ", ")))
		}
	}
	w.indexResends()
	if len(w.Starts) == 0 && len(errs) == 0 {
		errs = append(errs, diag.Errorf(diag.NodePos(w.File, w.root), "the workload starts no service: nothing to explore (add start: steps)"))
	}
	return errs
}

// indexResends ties each publish of an event to the step that produced
// it (produce, produce_overlapping), where the workload names both.
func (w *Workload) indexResends() {
	produced := map[string]int{}
	w.resends = map[int]int{}
	for i, c := range w.calls {
		switch p := c.Params.(type) {
		case *steps.ProduceParams:
			produced[p.Event] = i
		case *steps.OverlapParams:
			produced[p.First], produced[p.Second] = i, i
		case *steps.PublishParams:
			if at, ok := produced[deref(p.Event)]; ok && p.Event != nil {
				w.resends[i] = at
			}
		}
	}
}

// tie leaves out, with drop, the re-sends of the events drop leaves out.
func (w *Workload) tie(drop map[int]bool) {
	for resend, produce := range w.resends {
		if drop[produce] {
			drop[resend] = true
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Default is the built-in workload on sys: three events, two of them one
// aggregate's sequence; every service that uses the producer's database
// started first and the outbox drained; then the others; then the classic
// windows a relay and a consumer meet in production (builtinWindows), on
// broker brokerName (the re-sends' wait: caughtUp).
func Default(ctx context.Context, sys *system.System, out, brokerName string) (*Workload, diag.Errors) {
	var b strings.Builder
	fmt.Fprintf(&b, "name: \"explore: the built-in workload on %s\"\n", filepath.Base(sys.File))
	desc := "three events (two of them one aggregate's sequence), the producer-side services started and the outbox drained, then the consumer-side services; then two events committed in the reverse order of their ids"
	if len(sys.Groups) > 0 {
		desc += ", eight more in two batches while every replica runs"
	}
	b.WriteString("description: " + desc + " and, once the consumers caught up, a re-send of one event with the same payload and one with another payload\n")
	fmt.Fprintf(&b, "system: %q\nsteps:\n", relSystem(out, sys.File))
	b.WriteString("  - produce: {event: ev-1, amount: 100}\n  - produce: {event: ev-2, amount: 250, aggregate: acct-1}\n  - produce: {event: ev-3, amount: 40, aggregate: acct-1}\n")
	first, then := sides(sys)
	for _, n := range first {
		fmt.Fprintf(&b, "  - start: %s\n", n)
	}
	if len(first) > 0 {
		b.WriteString("  - expect: {outbox.unpublished: 0, within: 10s}\n")
	}
	for _, n := range then {
		fmt.Fprintf(&b, "  - start: %s\n", n)
	}
	b.WriteString(builtinWindows)
	if len(sys.Groups) > 0 {
		b.WriteString(replicaBurst)
	}
	b.WriteString(caughtUp(sys, brokerName))
	b.WriteString(builtinResends)
	// Written out, so that what the report says of it ("started at
	// workload.builtin:8:5") points into a file the user can read. Not a
	// .yaml: `runner run DIR` on the findings leaves it alone.
	file := filepath.Join(out, "workload.builtin")
	if err := outfile.Dir(out, 0o755); err == nil { // best effort: the workload is parsed from memory
		_ = outfile.Write(file, []byte(b.String()), 0o644) // a scenario for anyone to read
	}
	return parseWorkload(ctx, file, []byte(b.String()), nil)
}

// builtinWindows run once every service is up. Overlapping producer
// transactions commit ev-4 (the lower id) after ev-5 was published: a
// relay that keeps a cursor past the last id it published never publishes
// ev-4 (watermill#311).
const builtinWindows = `  - produce_overlapping: {first: ev-4, second: ev-5, amount: 70}
  - expect: {outbox.unpublished: 0, within: 10s}
`

// replicaBurst: where the system file runs replicas of a service (each
// started above, NAME-1 … NAME-N, a start step of its own, so a point
// faults one of them), the outbox fills while they all run, in two
// batches the relays poll apart: replicas that do not exclude each other
// publish the same rows, which the fault-free run already shows
// (double_published with no fault struck).
const replicaBurst = `  - produce: {event: ev-6, amount: 11}
  - produce: {event: ev-7, amount: 12}
  - produce: {event: ev-8, amount: 13}
  - produce: {event: ev-9, amount: 14}
  - sleep(for=40ms)
  - produce: {event: ev-10, amount: 15}
  - produce: {event: ev-11, amount: 16}
  - produce: {event: ev-12, amount: 17}
  - produce: {event: ev-13, amount: 18}
  - expect: {outbox.unpublished: 0, within: 10s}
`

// builtinResends: a relay's retry re-sends ev-1 as it was, a forged copy
// re-sends ev-2 with another amount: a correct consumer applies neither
// (it may leave the copy pending or refuse it; the history checker
// reports the identity conflict, it is no violation).
const builtinResends = `  - publish: {event: ev-1}
  - publish: {event: ev-2, amount: 999}
`

// caughtUp is the wait before the re-sends: they are re-sends only once
// the genuine events went through. Else the forged copy of ev-2, delivered
// first, is applied by the correct consumer too (phantom, on every
// build): a consumer a fault killed gets ev-2 again after its claim's
// idle time or its AckWait, one whose transaction failed nacks it behind
// what it prefetched (RabbitMQ), and a relay that marks a row once its
// client holds the record (librdkafka's linger) publishes ev-2 after the
// forged copy. Where the broker counts what a group has not finished with
// and hands entries out one by one (Redis, NATS), the wait is for that
// (stream.lag: a consumer that acked an event it lost does not hold it
// up); elsewhere for every consumer to have applied every event (RabbitMQ
// cannot count it, and a Kafka group's lag does not see a record still in
// the relay's client). A system that maps no inbox has no consumer to
// wait for.
func caughtUp(sys *system.System, brokerName string) string {
	switch {
	case sys.Inbox.Table == "":
		return ""
	case broker.WhyNot(brokerName, broker.GroupLag) == "" && broker.WhyNot(brokerName, broker.DeliveryCount) == "":
		return "  - expect: {stream.lag: 0, within: 30s}\n"
	}
	return "  - expect: {metrics.projection_lag: 0, within: 30s}\n"
}

// sides splits the services: the producer-side ones (their env or argv
// names ${producer_db.url}) first, the rest after, each sorted.
func sides(sys *system.System) (producer, rest []string) {
	for _, n := range sys.Names() {
		s := sys.Services[n]
		words := slices.Clone(s.Run)
		for _, v := range s.Env {
			words = append(words, v)
		}
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(w, "${producer_db.url}") }) {
			producer = append(producer, n)
		} else {
			rest = append(rest, n)
		}
	}
	return producer, rest
}

// relSystem is the system file as a scenario in dir names it.
func relSystem(dir, file string) string {
	ad, err1 := filepath.Abs(dir)
	af, err2 := filepath.Abs(file)
	if err1 != nil || err2 != nil {
		return file
	}
	if rel, err := filepath.Rel(ad, af); err == nil {
		return filepath.ToSlash(rel)
	}
	return af
}

func keyOf(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i]
		}
	}
	return nil
}

func valueOf(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
