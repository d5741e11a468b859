package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/explore"
	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"
)

const exploreUsage = "runner explore [--system FILE] [WORKLOAD.yaml] --out DIR [--budget 10m] [--actions kill,cut,error,delay,duplicate] [--depth 1|2] [--random --seed S --faults RATE --events N] [--parallel N] [--broker redis] [--shard K/N [--map FILE] | --map-only]"

// exploreFlags are explore's own flags, parsed.
type exploreFlags struct {
	p                       explore.Params
	system, actions, broker string
	only                    string
	random                  bool
	rnd                     explore.Random
	reports                 [3]string // junit, json, markdown
	htmlDir                 string    // --html-dir: the coverage as a picture
	shard, mapFile          string    // --shard K/N, --map FILE (exploreshard.go)
	servers                 []runner.ServerFlag
	// cmd and usage name the command in usage errors: explore, or soak
	// (explore's random mode on the reference system by default).
	cmd, usage string
}

func cmdExplore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if isMerge(args) {
		return cmdExploreMerge(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("explore")
	f := defineExploreFlags(fs)
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	return runExplore(ctx, fs, f, paths, stdout, stderr)
}

// runExplore explores with the parsed flags f: explore's, or soak's.
func runExplore(ctx context.Context, fs *flag.FlagSet, f *exploreFlags, paths []string, stdout, stderr io.Writer) int {
	w, ok := exploreInput(ctx, fs, f, paths, stderr)
	if !ok {
		return loadFailed(ctx, stderr)
	}
	if why := w.System.Unsupported(f.p.Runner.Brokers[0]); why != "" {
		// As `runner run` skips such a scenario: nothing to explore here,
		// which is neither a violation nor a clean bill.
		fmt.Fprintf(stdout, "%s skipped: %s: nothing was explored\n", f.cmd, safe.Line(why))
		return exitOK
	}
	// The points' (events') progress on stderr: explore and soak run long.
	pc, err := progress.ForStderr(stderr, "", "")
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	f.p.Progress, f.p.ProgressOut = pc, stderr
	files, err := openReports(f.reports[:])
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	defer closeAll(files)
	f.p.Log = stdout
	mode := fmt.Sprintf("depth %d", f.p.Depth)
	if f.p.Random != nil {
		mode = fmt.Sprintf("random: seed %d, %d events, fault rate %g per event", f.rnd.Seed, f.rnd.Events, f.rnd.Faults)
	}
	fmt.Fprintf(stdout, "%s %s: workload %q, actions %s, %s, budget %s\n", f.cmd, safe.Line(w.System.File), safe.Line(w.Name), strings.Join(f.p.Actions, ","), mode, f.p.Budget)
	res, err := explore.Explore(ctx, f.p, w)
	if res != nil {
		err = errors.Join(err, shardOutputs(ctx, res, f, err))
		res.Summary(stdout)
		err = errors.Join(err, writeExploreReports(files, res))
		if f.htmlDir != "" {
			err = errors.Join(err, writeExploreHTML(ctx, f.htmlDir, res, f, stderr))
		}
	}
	var invalid *world.InvalidError
	switch {
	case ctx.Err() != nil:
		return interrupted(stderr, false)
	case errors.As(err, &invalid):
		printErrors(invalid.Errs, stderr)
		return exitInvalid
	case err != nil:
		fmt.Fprintf(stderr, "runner: %s: %s\n", f.cmd, safe.Text(err.Error()))
		return exitEnvironment
	case res.Observed.Outcome != explore.Held || len(res.Findings) > 0:
		return exitFailed
	}
	return exitOK
}

func defineExploreFlags(fs *flag.FlagSet) *exploreFlags {
	f := &exploreFlags{cmd: "explore", usage: exploreUsage}
	p := &f.p
	fs.StringVar(&f.system, "system", "", "the team's system `FILE` (else the workload's system: key)")
	fs.StringVar(&p.Out, "out", "", "write each violation's minimal scenario to `DIR` (required; created)")
	durationFlag(fs, &p.Budget, "budget", 10*time.Minute, maxTimeout, "start no new point after `DURATION`; what is left is reported not explored")
	fs.StringVar(&f.actions, "actions", "kill,cut,error,delay,duplicate", "the fault actions to try (`LIST` of kill, cut, error, delay or delay(D), duplicate, drop; delay is delay(500ms); duplicate and drop are tried only where the broker's proxy applies them; drop is not in the default: a client waits out its driver's timeout, longer than the default settle)")
	countFlag(fs, &p.Depth, "depth", 1, 1, "`1`: one fault per run; 2: also a second fault on the restarted process, during the first's recovery")
	countFlag(fs, &p.NthCap, "nth-cap", 3, 1, "try at most `N` crossings of each boundary kind per process (after the reduction)")
	countFlag(fs, &p.Confirm, "confirm", 3, 0, "run each written scenario `N` times to confirm it (reproduces N/N, or flaky)")
	fs.StringVar(&f.only, "only", "", "run only the points whose name matches `REGEX` (e.g. 'consumer consumer_db\\.commit'; a point is named \"SERVICE TRIGGER nth=N do=ACTION\")")
	fs.BoolVar(&f.random, "random", false, "drive --events with faults at random crossings instead of the systematic points (seeded)")
	seedFlag(fs, &f.rnd.Seed, uint64(time.Now().UnixNano()%1_000_000), "seed of --random: the same seed replays the same schedule")
	fs.Float64Var(&f.rnd.Faults, "faults", 0.1, "with --random, the probability of a fault before each event, at a crossing drawn at random (`RATE`, 0..1)")
	check(fs, "faults", "a number from 0 to 1 such as 0.1", func() bool { return f.rnd.Faults >= 0 && f.rnd.Faults <= 1 })
	countFlag(fs, &f.rnd.Events, "events", 100, 1, "with --random, drive `N` events")
	countFlag(fs, &p.Runner.Parallel, "parallel", 0, 1, fmt.Sprintf("run `N` points at once (default: adaptive, from twice the CPUs up to %d as the running points' CPU use and the memory left allow)", adaptiveCeiling()))
	fs.StringVar(&f.broker, "broker", broker.Default(), "the `broker` the services talk to (its proxy maps the broker boundaries: Redis commands; publish, deliver, ack on NATS, RabbitMQ, Kafka)")
	fs.BoolVar(&p.Verbose, "v", false, "print every point's verdict, held ones too")
	f.servers = exploreServerFlags(fs, &p.Runner)
	fs.StringVar(&f.reports[0], "junit", "", "write a JUnit XML report (one testcase per point that ran, the points not run summed in one skipped case) to `FILE`")
	fs.StringVar(&f.reports[1], "json", "", "write a JSON report (the boundary map, every point, the findings) to `FILE`")
	fs.StringVar(&f.reports[2], "markdown", "", "write a Markdown coverage report (a boundary × action table) to `FILE`")
	shardFlags(fs, f)
	fs.StringVar(&f.htmlDir, "html-dir", "", "write the coverage as a picture to `DIR` (index.html: the service × boundary × action grid, coloured; a violation's cell links to its minimal scenario and to finding-N.html, the HTML report of one more run of it, with its timeline)")
	return f
}

// adaptiveCeiling is the most points explore's adaptive parallelism runs
// at once: six per CPU (a point mostly waits: on 2 cores the reference
// system's points ran fastest at 12–16 at once, 11.5 points/s against 8.8
// at 8), 4 to 16. Past 16 the team's services, which share the PostgreSQL
// connections left over by the runner's own pools, would run short of
// them.
func adaptiveCeiling() int { return min(16, max(4, 6*runtime.NumCPU())) }

// exploreServerFlags are the servers' and the run's flags, as run's; it
// returns the server flags, whose URLs exploreInput checks and puts in
// p.URLs.
func exploreServerFlags(fs *flag.FlagSet, p *runner.Params) []runner.ServerFlag {
	servers := append([]runner.ServerFlag{runner.PGFlag(fs, &p.PGURL, false)}, runner.BrokerFlags(fs, false)...)
	durationFlag(fs, &p.Timeout, "timeout", time.Minute, maxTimeout, "cancel a point's run that takes longer than `DURATION`")
	p.Settle = runner.DefaultSettle
	fs.Var(&boundedDuration{p: &p.Settle, max: scenario.MaxSettle}, "settle", "give the system up to `DURATION` after the workload's last step to settle (a workload's settle: overrides it)")
	check(fs, "settle", "a duration of at least 500ms such as 5s", func() bool { return p.Settle >= scenario.MinSettle })
	connectTimeoutFlag(fs, &p.ConnectTimeout, servers)
	return servers
}

// exploreInput checks the flags and loads the system and the workload
// (the built-in one without a file); a problem is printed, ok false.
func exploreInput(ctx context.Context, fs *flag.FlagSet, f *exploreFlags, paths []string, stderr io.Writer) (*explore.Workload, bool) {
	usage := func(format string, args ...any) (*explore.Workload, bool) {
		fmt.Fprintf(stderr, "runner "+f.cmd+": "+format+"\nusage: %s\n", append(args, f.usage)...)
		return nil, false
	}
	switch {
	case len(paths) > 1:
		return usage("one workload file, got %d: %s", len(paths), safe.Line(strings.Join(paths, " ")))
	case f.p.Out == "":
		return usage("--out DIR is required: the minimal scenarios are written there")
	case len(paths) == 0 && f.system == "":
		return usage("give --system FILE (the built-in workload drills it) or a workload file")
	case f.p.Depth > 2:
		return usage("--depth %d: 1 or 2", f.p.Depth)
	}
	if f.p.Runner.Parallel == 0 { // not given: chosen as the points run
		f.p.Runner.Parallel, f.p.Runner.Adaptive = adaptiveCeiling(), true
	}
	if !f.random {
		var set []string
		fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "events" || fl.Name == "seed" || fl.Name == "faults" {
				set = append(set, "--"+fl.Name)
			}
		})
		if len(set) > 0 {
			return usage("%s drive(s) the random mode: add --random (without it explore runs the systematic points)", strings.Join(set, ", "))
		}
	}
	if f.only != "" {
		re, err := regexp.Compile(f.only)
		if err != nil {
			return usage("--only: %v", err)
		}
		f.p.Only = re
	}
	acts, err := parseActions(f.actions)
	if err != nil {
		return usage("--actions: %v", err)
	}
	f.p.Actions = acts
	if f.p.Runner.Brokers, err = runner.ParseBrokers(f.broker); err != nil || len(f.p.Runner.Brokers) != 1 {
		return usage("--broker %q: want one broker, %s (each point runs on one)", safe.Line(f.broker), strings.Join(broker.Names(), ", "))
	}
	if !checkURLs(fs, stderr, f.servers) {
		return nil, false
	}
	f.p.Runner.URLs = runner.URLs(f.servers)
	if f.random {
		f.p.Random = &f.rnd
		set := false
		fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "timeout" })
		if !set { // one long run: its events, faults and restarts take their time
			// 100 ms an event, and 3 s a fault: its catch-up, a restart.
			f.p.Runner.Timeout = 2*time.Minute + time.Duration(f.rnd.Events)*(100*time.Millisecond+time.Duration(f.rnd.Faults*3*float64(time.Second)))
		}
	}
	if msg := checkShardFlags(f); msg != "" {
		return usage("%s", msg)
	}
	if err := outfile.Dir(f.p.Out, 0o755); err != nil { // never through a planted symlink
		return usage("--out: %v", err)
	}
	if f.htmlDir != "" {
		if err := outfile.Dir(f.htmlDir, 0o755); err != nil {
			return usage("--html-dir: %v", err)
		}
	}
	return loadWorkload(ctx, f, paths, stderr)
}

// loadWorkload loads --system and the workload, printing every problem.
func loadWorkload(ctx context.Context, f *exploreFlags, paths []string, stderr io.Writer) (*explore.Workload, bool) {
	sys, ok := loadSystem(ctx, nil, f.system, stderr)
	if !ok {
		return nil, false
	}
	var w *explore.Workload
	var errs diag.Errors
	if len(paths) == 0 {
		w, errs = explore.Default(ctx, sys, f.p.Out, f.p.Runner.Brokers[0])
	} else {
		w, errs = explore.LoadWorkload(ctx, paths[0], sys)
	}
	if len(errs) == 0 && !pinMap(ctx, f, w, stderr) {
		return nil, false
	}
	if len(errs) == 0 {
		// As `runner run` checks a scenario before it starts anything:
		// a ${…} the broker cannot give is said at its line, not met by
		// a service that fails to start.
		errs = w.Check(ctx, f.p.Out, f.p.Runner.Brokers[0])
	}
	if len(errs) > 0 {
		return nil, printErrors(errs, stderr)
	}
	return w, true
}

// parseActions reads --actions: any action of the scenario language's
// do: (fault.ParseAction), a bare delay meaning delay(500ms).
func parseActions(list string) ([]string, error) {
	var out []string
	for _, a := range runner.SplitList(list) {
		if a == "delay" {
			a = "delay(500ms)"
		}
		if _, err := fault.ParseAction(a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no action: give some of " + strings.Join(fault.ActionNames(), ", "))
	}
	return out, nil
}

// writeExploreReports writes the JUnit, JSON and Markdown reports asked for.
func writeExploreReports(files []*os.File, res *explore.Result) error {
	var errs []error
	for i, write := range []func(io.Writer) error{res.WriteJUnit, res.WriteJSON, res.WriteMarkdown} {
		if files[i] != nil {
			if err := write(files[i]); err != nil {
				errs = append(errs, fmt.Errorf("report %s: %w", files[i].Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}
