package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/soak"
	schema "github.com/outboxdrill/runner/sql"
)

const soakUsage = "runner soak [--system FILE] [--events N] [--faults RATE] [--seed S] [--out DIR] [explore's flags] | runner soak --in-process --events N --faults RATE --seed S [--parallel W] [--batch N] [--baseline] [--crash] [--with STEP] [--out DIR] [--budget D]"

// soakEvents is runner soak's default number of events: the soak is the
// long run.
const soakEvents = 2000

// cmdSoak is explore's random mode (one fault schedule, one shrinker, one
// checker): N events with faults at random crossings, on the team's
// system (--system) or, by default, on the reference system — the
// runner's own relay and consumer as processes behind the proxies. A
// violation is shrunk and written as a scenario to --out (default: a
// directory of its own, kept only when it holds one). --in-process is a
// random schedule of the reference steps run by the runner in this
// process: the engine runner bench measures.
func cmdSoak(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if slices.ContainsFunc(args, isInProcess) {
		return cmdSoakInProcess(ctx, slices.DeleteFunc(slices.Clone(args), isInProcess), stdout, stderr)
	}
	fs := newFlags("soak")
	f := defineExploreFlags(fs)
	f.cmd, f.usage, f.random, f.rnd.Events = "soak", soakUsage, true, soakEvents
	fs.Lookup("events").DefValue = fmt.Sprint(soakEvents)
	fs.Lookup("random").Usage = "always on: runner soak is explore's random mode"
	fs.Lookup("out").Usage = "write each violation's minimal scenario to `DIR` (default: a new directory, kept only when it holds one)"
	fs.Lookup("system").Usage = "the team's system `FILE` (default: the reference system, the runner's own relay and consumer as processes)"
	fs.Bool("in-process", false, "the in-process engine instead: a random schedule of the reference steps (faults drawn from their own parameters) run by the runner in this process, a violation shrunk and written to --out (flags: --events, --faults, --seed, --parallel W schedules at once, --batch N, --baseline, --crash, --with STEP, --out, --budget, --pg, --redis)")
	var batch int
	countFlag(fs, &batch, "batch", 100, 1, "with --in-process: `N` events a schedule produces before each relay and consume pass")
	fs.Bool("baseline", false, "with --in-process: first measure the raw baseline on the same servers")
	fs.Bool("crash", false, "with --in-process: also draw server crashes (producer_db, broker and consumer_db restarts)")
	fs.Var(new(stepsFlag), "with", "with --in-process: give every `STEP` of its name the schedule writes these parameters, e.g. 'consume(dedupe=entry_id)' (repeatable)")
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	var onlyInProcess []string
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "batch" || fl.Name == "baseline" || fl.Name == "with" || fl.Name == "crash" {
			onlyInProcess = append(onlyInProcess, "--"+fl.Name)
		}
	})
	if len(onlyInProcess) > 0 {
		fmt.Fprintf(stderr, "runner soak: %s: only with --in-process (the in-process engine's)\nusage: %s\n", strings.Join(onlyInProcess, ", "), soakUsage)
		return exitInvalid
	}
	cleanup, code := soakDefaults(f, paths, stderr)
	if code != 0 {
		cleanup(false)
		return code
	}
	code = runExplore(ctx, fs, f, paths, stdout, stderr)
	cleanup(code == exitFailed)
	return code
}

// isInProcess is --in-process among the arguments (as a flag: before a
// "--", any spelling flag takes).
func isInProcess(a string) bool {
	return a == "--in-process" || a == "-in-process" || a == "--in-process=true" || a == "-in-process=true"
}

// soakDefaults gives a soak without --system the reference system and
// without --out a directory of its own; cleanup removes what nobody needs
// once the soak ended (the out directory unless it holds a finding).
func soakDefaults(f *exploreFlags, paths []string, stderr io.Writer) (cleanup func(found bool), code int) {
	var dirs []string
	cleanup = func(found bool) {
		for _, d := range dirs {
			if found && d == f.p.Out {
				fmt.Fprintf(stderr, "runner soak: the findings are in %s\n", d)
				continue
			}
			os.RemoveAll(d)
		}
	}
	if f.p.Out != "" {
		// Checked before the reference system is written into it.
		if err := outfile.Dir(f.p.Out, 0o755); err != nil {
			fmt.Fprintf(stderr, "runner soak: --out: %v\nusage: %s\n", err, soakUsage)
			return cleanup, exitInvalid
		}
	}
	if f.p.Out == "" {
		dir, err := os.MkdirTemp("", "runner-soak-"+time.Now().Format("20060102-150405")+"-")
		if err != nil {
			fmt.Fprintf(stderr, "runner soak: %v\n", err)
			return cleanup, exitEnvironment
		}
		f.p.Out, dirs = dir, append(dirs, dir)
	}
	if f.system == "" && len(paths) == 0 && !strings.EqualFold(strings.TrimSpace(f.broker), pipeline.Broker) {
		// The reference relay and consumer speak Redis only: a skip (as
		// for a team's system on another broker) would explore nothing.
		fmt.Fprintf(stderr, "runner soak: --broker %s: the reference system (the runner's own relay and consumer as processes) speaks Redis only; drill another broker with --system FILE (a team's services on it)\nusage: %s\n", safe.Line(f.broker), soakUsage)
		return cleanup, exitInvalid
	}
	if f.system == "" && len(paths) == 0 {
		// Inside the out directory: the scenarios written there name it
		// (system: reference-system/system.yaml), so they replay as long
		// as the directory is kept.
		dir := filepath.Join(f.p.Out, "reference-system")
		if err := outfile.Dir(dir, 0o700); err != nil {
			fmt.Fprintf(stderr, "runner soak: %v\n", err)
			return cleanup, exitEnvironment
		}
		var err error
		if f.system, err = writeReferenceSystem(dir); err != nil {
			fmt.Fprintf(stderr, "runner soak: %v\n", err)
			return cleanup, exitEnvironment
		}
	}
	return cleanup, 0
}

// referenceSystem is the reference pipeline as a team's system: the
// runner's own relay and consumer (runner reference relay|consumer) as
// processes, drilled through the proxies like anybody's services.
const referenceSystem = `# The reference relay and consumer as processes (runner soak's default system).
services:
  relay:    {run: ["${runner}", reference, relay], env: {DATABASE_URL: "${producer_db.url}", REDIS_URL: "${broker.url}", STREAM: "${stream}"}, ready: {log: "ready"}}
  consumer: {run: ["${runner}", reference, consumer], env: {DATABASE_URL: "${consumer_db.url}", REDIS_URL: "${broker.url}", STREAM: "${stream}", GROUP: "${consumer}"}, ready: {log: "ready"}}
schema: {producer: producer.sql, consumer: consumer.sql}
produce: "INSERT INTO outbox (event_id, payload) VALUES (${event}, ${payload}::jsonb)"
outbox:     {table: outbox, event_id: event_id, payload: payload, unpublished: "NOT published"}
stream:     {event_id: event_id, payload: payload}
inbox:      {table: inbox, consumer: consumer_id, event_id: event_id, payload: payload}
projection: "SELECT consumer_id, currency, amount, events FROM projection"
brokers:    [redis]
`

// writeReferenceSystem writes the reference system and its schema (the
// runner's own, embedded) to dir, and returns the system file.
func writeReferenceSystem(dir string) (string, error) {
	for name, text := range map[string]string{"system.yaml": referenceSystem, "producer.sql": schema.Producer, "consumer.sql": schema.Consumer} {
		if err := outfile.Write(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "system.yaml"), nil
}

// cmdSoakInProcess is runner soak --in-process: a random schedule of the
// reference steps (faults drawn from their own parameters) run by the
// runner in this process, judged by the scenarios' history checker; a
// violation is shrunk and written to --out (default: a directory of its
// own, kept only when it holds one).
func cmdSoakInProcess(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("soak")
	var p soak.Params
	countFlag(fs, &p.Events, "events", 10000, 1, "drive `N` events through the pipeline")
	fs.Float64Var(&p.Faults, "faults", 0.1, "probability of a fault at each decision point (`RATE`, 0..1)")
	check(fs, "faults", "a number from 0 to 1 such as 0.1", func() bool { return p.Faults >= 0 && p.Faults <= 1 })
	fs.Uint64Var(&p.Seed, "seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the schedule: the same seed writes the same schedule, and the run replays exactly")
	countFlag(fs, &p.Workers, "parallel", 2, 1, "`N` schedules at once, each a scenario with a database pair and a stream of its own, the events shared out between them")
	countFlag(fs, &p.Batch, "batch", 100, 1, "`N` events a schedule produces before each relay and consume pass")
	servers := redisFlags(fs, &p.PGURL, &p.Redis)
	connectTimeoutFlag(fs, &p.ConnectTimeout, servers)
	fs.BoolVar(&p.Baseline, "baseline", false, "first measure the raw baseline (bare transactions and XADD/XACK) on the same servers")
	fs.BoolVar(&p.Crash, "crash", false, "also draw server crashes: producer_db(restart) once a batch is produced, broker(restart) once it is relayed, consumer_db(restart) once it is consumed, each at RATE (the runner's own servers only: not with --pg or --redis)")
	fs.Var((*stepsFlag)(&p.With), "with", "give every `STEP` of its name the schedule writes these parameters, in the scenario language's shorthand, e.g. 'consume(dedupe=entry_id)': soak an anti-pattern (repeatable)")
	fs.StringVar(&p.Out, "out", "", "write each violation's shrunk schedule, a scenario, to `DIR` (default: a new directory, kept only when it holds one)")
	durationFlag(fs, &p.Budget, "budget", 5*time.Minute, maxTimeout, "stop shrinking the violations after `DURATION`")
	fs.Bool("in-process", true, "the in-process engine (this one)")
	if code, done := noArgs(fs, args, stdout, stderr, inProcessUsage); done {
		return code
	}
	if err := p.Validate(); err != nil { // the flags checked each value already
		fmt.Fprintf(stderr, "runner soak: %v\nusage: %s\n", err, inProcessUsage)
		return exitInvalid
	}
	if !checkURLs(fs, stderr, servers) {
		return exitInvalid
	}
	cleanup, code := soakOut(&p, stderr)
	if code != 0 {
		return code
	}
	pc, err := progress.ForStderr(stderr, "events", "violation(s)")
	if err != nil {
		cleanup(false)
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	p.Progress = progress.New(stderr, pc)
	// The verdict is printed once known, before the cleanup and shrinking;
	// the progress ends there.
	p.Judged = func(rep *soak.Report) { p.Progress.Close(); fmt.Fprint(stdout, rep.Format()) }
	rep, err := soak.Soak(ctx, p)
	p.Progress.Close()
	found := err == nil && len(rep.Findings) > 0
	cleanup(found)
	switch {
	case ctx.Err() != nil:
		return interrupted(stderr, false)
	case errors.As(err, new(*soak.WithError)):
		fmt.Fprintf(stderr, "runner soak: %v\nusage: %s\n", err, inProcessUsage)
		return exitInvalid
	case err != nil:
		fmt.Fprintf(stderr, "runner: soak: %v (seed %d)\n", err, p.Seed)
		return exitEnvironment
	}
	fmt.Fprint(stdout, rep.FormatFindings())
	if len(rep.Violations) > 0 {
		return exitFailed
	}
	return exitOK
}

const inProcessUsage = "runner soak --in-process --events N --faults RATE (0..1) --seed S [--parallel W] [--batch N] [--baseline] [--crash] [--with STEP] [--out DIR] [--budget D]"

// soakOut gives an in-process soak without --out a directory of its own;
// cleanup removes it unless it holds a finding.
func soakOut(p *soak.Params, stderr io.Writer) (cleanup func(found bool), code int) {
	if p.Out != "" {
		if err := outfile.Dir(p.Out, 0o755); err != nil {
			fmt.Fprintf(stderr, "runner soak: --out: %v\nusage: %s\n", err, inProcessUsage)
			return nil, exitInvalid
		}
		return func(bool) {}, 0
	}
	dir, err := os.MkdirTemp("", "runner-soak-"+time.Now().Format("20060102-150405")+"-")
	if err != nil {
		fmt.Fprintf(stderr, "runner soak: %v\n", err)
		return nil, exitEnvironment
	}
	p.Out = dir
	return func(found bool) {
		if found {
			fmt.Fprintf(stderr, "runner soak: the findings are in %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}, 0
}

// stepsFlag is a flag each use of which adds one value, commas and all
// (a step's shorthand has them).
type stepsFlag []string

func (s *stepsFlag) String() string {
	if s == nil {
		return ""
	}
	return strings.Join(*s, " ")
}

func (s *stepsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}
