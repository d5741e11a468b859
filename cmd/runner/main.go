// Command runner runs declarative outbox/inbox fault-drill scenarios against
// real PostgreSQL and a real broker: Redis Streams, NATS JetStream,
// RabbitMQ or Kafka (--broker redis|nats|rabbitmq|kafka|all; without
// --kafka, Kafka is franz-go's kfake, which this program serves itself as a
// child process, labelled "kafka (kfake)" in every report).
//
//	runner run [flags] [files or dirs...]       run scenarios (default dir: scenarios)
//	runner validate [--system FILE] [files or dirs...]  check scenarios and system files (mappings against their schema) without running them
//	runner list [flags] [files or dirs...]      list scenarios: file, name, tags (--system FILE: and its services)
//	runner docs                                 print the scenario-language reference
//	runner schema [--system]                    print the JSON Schema of scenario (or system) files
//	runner explore [flags] [WORKLOAD.yaml]      find a team's fault windows, write each as a minimal scenario
//	runner explore merge --out DIR SHARD-DIR... put explore --shard K/N's outputs together into one report
//	runner init --relay CMD --consumer CMD …    write a team's first system file from its schemas and services
//	runner soak [flags]                         explore's random mode, on the reference system by default
//	runner bench [flags] [files or dirs...]     measure start, isolation, growth and throughput
//	runner clean [--pg URL] [--redis URL] [--nats URL] [--rabbitmq URL] [--kafka HOST:PORT]  remove what earlier runs left behind
//	runner reference [flags] relay|consumer     run the reference relay or consumer as a process (drill it via --system)
//	runner help [command]                       print the usage of runner or of one command
//	runner version (or --version)               print the build: commit, modified, Go version
//
// Every command takes -h or --help: its flags grouped under headings, as
// the docs write them (--flag), and examples (help.go).
//
// Exit status: 0 all passed, 1 a scenario failed, 2 invalid scenario or usage,
// 3 the run itself could not proceed (servers), 4 an internal error (a panic:
// a bug in the runner; its stack is written to a file named on stderr),
// 130 interrupted (SIGINT), 143 terminated (SIGTERM). Either signal cleans
// up first, as 128+signal says to a shell; a second one kills at once. A
// fatal runtime error (a stack overflow, out of memory) cannot be recovered:
// the Go runtime prints it and exits 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"io"
	"maps"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/bench"
	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kinds"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/internal/version"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/system"
	"github.com/outboxdrill/runner/world"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitInvalid     = 2
	exitEnvironment = 3
	exitInternal    = 4   // a panic: a bug in the runner, not the input's fault
	exitInterrupted = 130 // 128+SIGINT
	exitTerminated  = 143 // 128+SIGTERM: the same cleanup, told apart for the caller
)

const defaultDir = "scenarios"

// maxErrors bounds the problems printed; the count of all is still given.
const maxErrors = 200

// quietRedis drops go-redis's own log lines (connection retries): the
// runner reports every error itself, once, with its context.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func main() {
	kinds.ServeChild() // this program re-executed as the runner's own Kafka-protocol server
	redis.SetLogger(quietRedis{})
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var terminated atomic.Bool
	go func() {
		s := <-sigs
		terminated.Store(s == syscall.SIGTERM)
		signal.Stop(sigs) // a second signal kills at once; the first one cleans up
		cancel()
	}()
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if code == exitInterrupted && terminated.Load() {
		code = exitTerminated
	}
	os.Exit(code)
}

// help is what each command's usage says: its arguments and one line on
// what it does. Kept apart from commands, whose functions print it.
var help = map[string]struct{ args, summary string }{
	"bench":     {"[flags] [files or dirs...]", "measure start, isolation, library wall time, growth, soak throughput, the proxies beside a bare forwarder and explore's points/s; print a table"},
	"clean":     {runner.ServerArgs(), "remove what earlier runs left: databases, streams, queues and exchanges (--keep, killed runs; never a live run's), killed runs' server dirs and service processes"},
	"docs":      {"", "print the scenario-language reference (Markdown)"},
	"explore":   {"[--system FILE] [WORKLOAD.yaml] --out DIR [flags]", "find a team's fault windows: observe the boundaries its services cross, try a fault at each, write each violation as a minimal scenario (explore merge: put --shard K/N's outputs together)"},
	"help":      {"[command]", "print the usage of runner, or of one command"},
	"init":      {"--relay CMD --consumer CMD --schema-producer FILE --schema-consumer FILE [flags]", "write a team's first system file and starter scenarios from its schemas and what its relay and consumer do with a probe event; validate them and run the fault-free drill"},
	"list":      {"[flags] [--system FILE] [files or dirs...]", "list scenarios: file, name, tags; with --system, what run --system would run and the system's services"},
	"reference": {"[flags] relay|consumer", "run the reference relay or consumer as a long-lived process (env DATABASE_URL, REDIS_URL, STREAM, GROUP), to drill it through a system file"},
	"run":       {"[flags] [files or dirs...]", "run scenarios against real PostgreSQL and " + runner.BrokerList() + " (--broker)"},
	"schema":    {"[--system]", "print the JSON Schema of scenario files, or of system files (draft 2020-12)"},
	"soak":      {"[flags]", "explore's random mode: N events with faults at random crossings, on the reference system (or --system); --in-process: a random schedule of the reference steps, run in this process"},
	"version":   {"", "print which build of the runner this is: its commit, whether it was modified, the Go version (also: runner --version)"},
	"validate":  {"[--system FILE] [files or dirs...]", "check scenarios and system files without running anything; a system file's mappings are checked against its schema on a throwaway database pair"},
}

type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// commands maps each subcommand to its implementation; one sorted place
// (help, which refers to commands, is Main's).
var commands = map[string]command{
	"bench":     cmdBench,
	"clean":     cmdClean,
	"docs":      cmdDocs,
	"explore":   cmdExplore,
	"init":      cmdInit,
	"list":      cmdList,
	"reference": cmdReference,
	"run":       cmdRun,
	"schema":    cmdSchema,
	"soak":      cmdSoak,
	"validate":  cmdValidate,
	"version":   cmdVersion,
}

// cmdVersion prints the build: what a bug report needs to name.
func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if code, done := noArgs(newFlags("version"), args, stdout, stderr, "runner version"); done {
		return code
	}
	fmt.Fprintln(stdout, version.String())
	return exitOK
}

// Main is the whole CLI, callable from tests. A panic inside a command is
// an internal error: its stack goes to a file, exit 4 (a Go panic would
// exit 2, which says the input is invalid). A panic on another goroutine
// than Main's is beyond this recover: runner.Run turns one in a scenario's
// worker into a *runner.InternalError, reported the same way.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if v := recover(); v != nil {
			code = internalError(stderr, args, v, debug.Stack())
		}
	}()
	return dispatch(ctx, args, stdout, stderr)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitInvalid
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		return cmdHelp(ctx, args[1:], stdout, stderr)
	}
	if args[0] == "--version" || args[0] == "-version" {
		return cmdVersion(ctx, args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "runner: unknown command %q%s\n", args[0], diag.Suggest(args[0], commandNames()))
		usage(stderr)
		return exitInvalid
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// internalError reports a panic (value v, stack) of the runner run with
// args: the panic and its stack to a file in the temp dir, one line on
// stderr naming it; exit 4. Only the command name of args is written: the
// rest may hold a password (--pg URL).
func internalError(stderr io.Writer, args []string, v any, stack []byte) int {
	cmd := "runner"
	if len(args) > 0 {
		cmd += " " + args[0]
	}
	version := "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Path + " " + bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
				version += " " + s.Key + "=" + s.Value
			}
		}
	}
	report := fmt.Sprintf("runner: internal error (a bug in the runner, please report it with this file)\n"+
		"runner version: %s\ngo: %s %s/%s\ncommand: %s (its other arguments left out: they may hold passwords)\ntime: %s\n\npanic: %v\n\n%s",
		version, runtime.Version(), runtime.GOOS, runtime.GOARCH, cmd, time.Now().Format(time.RFC3339), v, stack)
	what := safe.LongLine(fmt.Sprint(v))
	f, err := os.CreateTemp("", "runner-panic-*.txt")
	if err == nil {
		_, err = f.WriteString(report)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintf(stderr, "runner: internal error (a bug in the runner, please report it): %s; no file for the stack (%v), so here it is:\n%s", what, err, report)
		return exitInternal
	}
	fmt.Fprintf(stderr, "runner: internal error (a bug in the runner, please report it): %s; the stack is in %s\n", what, f.Name())
	return exitInternal
}

// cmdHelp prints the usage of runner, or of the command named.
func cmdHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		usage(stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintln(stderr, "usage: runner help [command]")
		return exitInvalid
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help":
		fmt.Fprintf(stdout, "usage: runner help %s\n\n%s\n\nExamples:\n  %s\n", help["help"].args, help["help"].summary, strings.Join(examples["help"], "\n  "))
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "runner help: unknown command %q%s\n", args[0], diag.Suggest(args[0], commandNames()))
		usage(stderr)
		return exitInvalid
	}
	return cmd(ctx, []string{"--help"}, stdout, stderr)
}

func commandNames() []string {
	var names []string
	for n := range help {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: runner <command> [flags] [files or dirs...]")
	fmt.Fprintln(w, "commands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-9s %s\n", n, help[n].summary)
	}
	fmt.Fprintln(w, "run 'runner help <command>' (or 'runner <command> --help') for a command's flags, grouped, and examples")
	fmt.Fprintln(w, "examples:")
	for _, e := range []string{examples["run"][0], examples["run"][1], examples["validate"][0], examples["explore"][0]} {
		fmt.Fprintf(w, "  %s\n", e)
	}
	fmt.Fprintln(w, "exit status: 0 passed, 1 a scenario failed, 2 invalid scenario or usage, 3 servers unavailable, 4 internal error (a bug: its stack in a file), 130 interrupted (SIGINT), 143 terminated (SIGTERM)")
}

// newFlags makes the flag set of a command; parseArgs prints its usage.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseArgs reports errors itself
	fs.Usage = func() {}
	return fs
}

// parseArgs parses a command's flags, which may follow the paths (`runner
// run scenarios/ -v`), and returns the paths. With -h or --help it prints
// the usage to stdout: done, exit 0. A bad flag or flag value is a usage
// error: said on stderr, exit 2.
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (paths []string, code int, done bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				commandUsage(stdout, fs)
				return nil, exitOK, true
			}
			fmt.Fprintf(stderr, "runner %s: %s\n", fs.Name(), flagError(fs, err))
			fmt.Fprintf(stderr, "usage: runner %s %s (runner help %s: every flag)\n", fs.Name(), usageOf(fs.Name()).args, fs.Name())
			return nil, exitInvalid, true
		}
		args = fs.Args()
		if len(args) == 0 {
			return paths, exitOK, false
		}
		paths = append(paths, args[0])
		args = args[1:]
	}
}

var (
	undefinedFlag = lazy.Regexp(`^flag provided but not defined: -+(.*)$`)
	needsValue    = lazy.Regexp(`^flag needs an argument: -+(.*)$`)
	badFlagValue  = lazy.Regexp(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]*): `)
)

// flagError rewords the flag package's errors: a did-you-mean for an
// unknown flag, what a bad value should look like.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := undefinedFlag().FindStringSubmatch(msg); m != nil {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		sug := diag.Suggest(m[1], names)
		if best, ok := strings.CutPrefix(sug, ` (did you mean "`); ok {
			sug = " (did you mean " + dashed(strings.TrimSuffix(best, `"?)`)) + "?)"
		}
		return "unknown flag " + dashed(m[1]) + sug
	}
	if m := needsValue().FindStringSubmatch(msg); m != nil {
		return dashed(m[1]) + " needs a value"
	}
	m := badFlagValue().FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	f := fs.Lookup(m[2])
	if f == nil {
		return msg
	}
	want := map[string]string{
		"*main.checked":       "",
		"*flag.durationValue": "a duration such as 30s, 2m or 1h30m",
		"*flag.intValue":      "a whole number",
		"*flag.uint64Value":   "a whole number, 0 or more",
		"*flag.float64Value":  "a number such as 0.1",
		"*flag.boolValue":     "true or false",
	}[fmt.Sprintf("%T", f.Value)]
	if c, ok := f.Value.(*checked); ok {
		want = c.want
	}
	if why := msg[len(m[0]):]; strings.HasPrefix(why, errTooLong) {
		return fmt.Sprintf("%s %q: %s", dashed(m[2]), m[1], why)
	}
	if want == "" {
		return fmt.Sprintf("%s %q: %s", dashed(m[2]), m[1], msg[len(m[0]):])
	}
	return fmt.Sprintf("%s %q: want %s", dashed(m[2]), m[1], want)
}

// checked is a flag whose value must also meet a condition (a count of at
// least 1, a duration > 0): want says what is wanted, for the message.
type checked struct {
	flag.Value
	ok   func() bool
	want string
}

func (c *checked) Set(s string) error {
	if err := c.Value.Set(s); err != nil {
		return err
	}
	if !c.ok() {
		return errors.New("out of range")
	}
	return nil
}

func (c *checked) String() string {
	if c == nil || c.Value == nil { // flag.PrintDefaults asks a zero value
		return ""
	}
	return c.Value.String()
}

// check puts a condition on the flag name, already defined.
func check(fs *flag.FlagSet, name, want string, ok func() bool) {
	f := fs.Lookup(name)
	f.Value = &checked{f.Value, ok, want}
}

// durationFlag defines a duration flag that must be > 0 and at most max.
func durationFlag(fs *flag.FlagSet, p *time.Duration, name string, value, max time.Duration, usage string) {
	*p = value // before Var: it is the default help shows
	fs.Var(&boundedDuration{p: p, max: max}, name, usage)
	check(fs, name, "a duration > 0 such as 30s, 2m or 1h30m", func() bool { return *p > 0 })
}

// Most a duration flag takes: a scenario longer than a day is no drill,
// a server that has not answered in an hour will not.
const (
	maxTimeout        = 24 * time.Hour
	maxConnectTimeout = time.Hour
)

// boundedDuration is a duration flag's value with an upper bound: a value
// over it, or too large for a time.Duration at all (9999999h overflows
// 2562047h), is refused saying so, not as "not a duration".
type boundedDuration struct {
	p   *time.Duration
	max time.Duration
}

// errTooLong starts the message of a duration over its bound; flagError
// shows it as it is.
const errTooLong = "too long: at most "

// durationSyntax is time.ParseDuration's grammar: a string of it that does
// not parse overflows.
var durationSyntax = lazy.Regexp(`^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)[a-zµμ]+)+$`)

func (d *boundedDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	switch {
	case err != nil && durationSyntax().MatchString(s) && strings.Contains(err.Error(), "invalid duration"):
		return errors.New(errTooLong + shortDuration(d.max))
	case err != nil:
		return err
	case v > d.max:
		return errors.New(errTooLong + shortDuration(d.max))
	}
	*d.p = v
	return nil
}

func (d *boundedDuration) String() string {
	if d == nil || d.p == nil { // flag.PrintDefaults asks a zero value
		return "0s"
	}
	return d.p.String()
}

// shortDuration is d without zero units: 24h, not 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// countFlag defines a whole-number flag that must be at least least.
func countFlag(fs *flag.FlagSet, p *int, name string, value, least int, usage string) {
	fs.IntVar(p, name, value, usage)
	check(fs, name, fmt.Sprintf("a whole number, %d or more", least), func() bool { return *p >= least })
}

// connectTimeoutFlag is --connect-timeout of every command that connects
// to the servers its flags name.
func connectTimeoutFlag(fs *flag.FlagSet, p *time.Duration, servers []runner.ServerFlag) {
	durationFlag(fs, p, "connect-timeout", world.DefaultConnectTimeout, maxConnectTimeout, "give up on a server that does not answer within `DURATION` (each of "+runner.FlagNames(servers)+")")
}

// load expands paths and loads every scenario, printing every problem. The
// files are read under ctx: once it is cancelled nothing more is read,
// and nothing is printed (the caller says interrupted: see loadFailed).
func load(ctx context.Context, paths []string, stderr io.Writer) ([]*scenario.Scenario, bool) {
	files, ok := scenarioFiles(paths, stderr)
	if !ok {
		return nil, false
	}
	scs, errs := scenario.LoadFilesContext(ctx, files, kinds.All())
	if ctx.Err() != nil {
		return nil, false
	}
	if len(errs) > 0 {
		return nil, printErrors(errs, stderr)
	}
	return scs, true
}

// scenarioFiles are the scenario files at paths (the library without
// any); none, or a path that cannot be read, is said on stderr: ok false.
func scenarioFiles(paths []string, stderr io.Writer) ([]string, bool) {
	if len(paths) == 0 {
		paths = []string{defaultDir}
	}
	files, err := scenario.ExpandPaths(paths)
	if err != nil {
		fmt.Fprintf(stderr, "runner: %s\n", safe.Text(err.Error()))
		return nil, false
	}
	if len(files) == 0 {
		fmt.Fprintf(stderr, "runner: no scenario files (*.yaml) in %s\n", safe.LongLine(strings.Join(paths, ", ")))
		return nil, false
	}
	return files, true
}

// loadFailed is the exit code of a command whose files did not load:
// interrupted when ctx was cancelled meanwhile, else invalid input.
func loadFailed(ctx context.Context, stderr io.Writer) int {
	if ctx.Err() != nil {
		return interrupted(stderr, false)
	}
	return exitInvalid
}

// useSystem applies --system to every scenario (over a system: key) and
// checks that every service a step names is in its scenario's system file.
func useSystem(ctx context.Context, scs []*scenario.Scenario, file string, stderr io.Writer) bool {
	_, ok := loadSystem(ctx, scs, file, stderr)
	return ok
}

// loadSystem is useSystem that also returns the --system file (nil
// without one).
func loadSystem(ctx context.Context, scs []*scenario.Scenario, file string, stderr io.Writer) (*system.System, bool) {
	sys, errs, ok := systemProblems(ctx, scs, file, stderr)
	if !ok {
		return nil, false
	}
	return sys, len(errs) == 0 || printErrors(errs, stderr)
}

// systemProblems loads the --system file (nil without one), applies it to
// every scenario and returns every problem of the file and of the
// scenarios with it; ok is false when the file could not be read (said
// on stderr) or ctx ended. A file with problems is applied to nothing:
// each would only repeat them.
func systemProblems(ctx context.Context, scs []*scenario.Scenario, file string, stderr io.Writer) (sys *system.System, errs diag.Errors, ok bool) {
	if file != "" {
		var err error
		sys, errs, err = system.Load(ctx, file, kinds.All())
		switch {
		case ctx.Err() != nil:
			return nil, nil, false
		case err != nil:
			fmt.Fprintf(stderr, "runner: --system: %s\n", safe.LongLine(err.Error()))
			return nil, nil, false
		case len(errs) > 0:
			return nil, errs, true
		}
	}
	seen := map[string]bool{}
	overridden := map[string]bool{}
	for _, sc := range scs {
		for _, e := range sc.UseSystem(sys) {
			if !seen[e.Error()] { // a system file's mistake, once for all its scenarios
				seen[e.Error()] = true
				errs = append(errs, e)
			}
		}
		if sc.SystemOverridden != "" {
			overridden[sc.SystemOverridden] = true
		}
	}
	if len(overridden) > 0 && len(errs) == 0 {
		// --system applies to every scenario: said, as it is not what the
		// files say.
		fmt.Fprintf(stderr, "runner: --system %s replaces the system: key of scenarios that name %s\n",
			safe.Line(file), safe.Line(strings.Join(slices.Sorted(maps.Keys(overridden)), ", ")))
	}
	return sys, errs, true
}

// printErrors prints load errors (at most maxErrors) and reports false.
func printErrors(errs diag.Errors, stderr io.Writer) bool {
	for i, e := range errs {
		if i == maxErrors {
			fmt.Fprintf(stderr, "... and %d more\n", len(errs)-maxErrors)
			break
		}
		fmt.Fprintln(stderr, safe.LongLine(e.Error()))
	}
	fmt.Fprintf(stderr, "%d problem(s) in %d file(s); nothing was run\n", len(errs), countFiles(errs))
	return false
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run")
	p := runner.Params{Out: stdout, Log: stderr, Warn: stderr}
	servers := append([]runner.ServerFlag{runner.PGFlag(fs, &p.PGURL, false)}, runner.BrokerFlags(fs, false)...)
	brokers := &listFlag{v: broker.Default()}
	fs.Var(brokers, "broker", "run every scenario on `"+runner.BrokerChoices()+"` (or a list: "+runner.BrokerExample()+"; given twice, both): one result per scenario and broker")
	sel := selectionFlags(fs, &p)
	durationFlag(fs, &p.Timeout, "timeout", time.Minute, maxTimeout, "cancel a scenario that runs longer than `DURATION` (at most 24h)")
	p.Settle = runner.DefaultSettle
	fs.Var(&boundedDuration{p: &p.Settle, max: scenario.MaxSettle}, "settle", "give a team's system up to `DURATION` after the last step to settle before it is judged (at most 10m; a scenario's settle: overrides it; raised to outlast the timers its services announced to the broker; what a running system still owes then is stuck)")
	check(fs, "settle", "a duration of at least 500ms such as 5s or 30s (a system is quiet after 300ms without a change)", func() bool { return p.Settle >= scenario.MinSettle })
	fs.BoolVar(&p.Verbose, "v", false, "print every scenario's step trace")
	countFlag(fs, &p.Parallel, "parallel", runtime.NumCPU(), 1, "run `N` scenarios at once, by default one per CPU (scenarios mostly wait on their windows: twice that is often faster for the library alone)")
	connectTimeoutFlag(fs, &p.ConnectTimeout, servers)
	fs.BoolVar(&p.FailFast, "fail-fast", false, "start no new scenario after one failed")
	countFlag(fs, &p.Repeat, "repeat", 1, 1, "run each selected scenario `N` times on each broker, each run its own result, and name the scenarios whose verdicts differed (flaky: 2/3 passed); exit 1 if any run failed")
	var reports [4]string
	fs.StringVar(&reports[0], "junit", "", "write a JUnit XML report to `FILE`")
	fs.StringVar(&reports[1], "json", "", "write a JSON report (every step, params, outcome, observed state) to `FILE`")
	fs.StringVar(&reports[2], "markdown", "", "write a Markdown report with sequence diagrams of failures to `FILE`")
	fs.StringVar(&reports[3], "guarantees", "", "write what each broker guaranteed, per fault window, to `FILE` (use with --broker all: docs/broker-guarantees.md)")
	htmlFile := htmlFlag(fs)
	keep := fs.String("keep", "", "leave the databases and stream of `failed|all` scenarios for inspection (needs the URL of PostgreSQL and of every broker of the run: "+runner.FlagNames(servers)+")")
	systemFile := fs.String("system", "", "drill a team's own services: the system `FILE` applies to every scenario (over a scenario's own system: key, which it says)")
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	var err error
	if p.Brokers, err = runner.ParseBrokers(brokers.v); err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	fs.Visit(func(fl *flag.Flag) { p.BrokerGiven = p.BrokerGiven || fl.Name == "broker" })
	if !checkURLs(fs, stderr, servers) {
		return exitInvalid
	}
	p.URLs = runner.URLs(servers)
	if !keepFlag(&p, *keep, servers, stderr) {
		return exitInvalid
	}
	if p.Repeat > 1 && reports[3] != "" {
		fmt.Fprintln(stderr, "runner: --guarantees reads one verdict per scenario and broker: not with --repeat")
		return exitInvalid
	}
	scs, ok := loadSelected(ctx, paths, sel, &p, stderr)
	if !ok || !useSystem(ctx, scs, *systemFile, stderr) {
		return loadFailed(ctx, stderr)
	}
	if len(scs) == 0 {
		fmt.Fprintf(stdout, "ok: shard %s holds no scenario\n", sel.shard)
		return exitOK
	}
	if !p.Verbose {
		p.Log = nil
	}
	progressed, err := progress.ForStderr(stderr, "scenarios", "failed")
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	// Report files are opened before anything runs: a wrong path costs no run.
	if err := checkHTMLPath(*htmlFile); err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	files, err := openReports(reports[:])
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitInvalid
	}
	p.Progress = progress.New(stderr, progressed)
	rep, err := runner.Run(ctx, p, scs)
	p.Progress.Close()
	if rep != nil {
		fmt.Fprintln(stdout, rep.Summary())
	}
	// Reports are written whatever the result: failures are what they are for.
	return runExit(ctx, errors.Join(err, writeReports(files, rep), writeHTML(*htmlFile, rep, fs, &p)), rep, p.Keep != runner.KeepNone, stderr)
}

// runExit is run's exit code for what the run returned, saying why on
// stderr: a panic (4), an interrupt, invalid scenarios (2), a setup
// problem (3), a failed scenario (1).
func runExit(ctx context.Context, err error, rep *report.Report, kept bool, stderr io.Writer) int {
	var invalid *world.InvalidError
	var internal *runner.InternalError
	switch {
	case errors.As(err, &internal):
		return internalError(stderr, []string{"run"}, internal.Value, internal.Stack)
	case ctx.Err() != nil:
		return interrupted(stderr, kept)
	case errors.As(err, &invalid):
		printErrors(invalid.Errs, stderr)
		return exitInvalid
	case err != nil:
		fmt.Fprintf(stderr, "runner: %s\n", safe.Text(err.Error()))
		return exitEnvironment
	case rep.Failed() > 0:
		return exitFailed
	}
	return exitOK
}

// keepFlag sets p.Keep from --keep, which needs every server of the run
// given by URL: the runner's own servers stop when it exits.
func keepFlag(p *runner.Params, keep string, servers []runner.ServerFlag, stderr io.Writer) bool {
	switch runner.Keep(keep) {
	case runner.KeepNone, runner.KeepFailed, runner.KeepAll:
		p.Keep = runner.Keep(keep)
	default:
		fmt.Fprintf(stderr, "runner: --keep wants failed or all, got %q\n", keep)
		return false
	}
	if p.Keep != runner.KeepNone && !runner.AllGiven(p) {
		fmt.Fprintf(stderr, "runner: --keep needs --pg and the URL of each broker run (%s): the runner's own servers stop when it exits\n", runner.FlagNames(servers[1:]))
		return false
	}
	return true
}

// pipelineBroker is the broker soak and bench drive the reference pipeline
// on: Redis only (its raw baseline is XADD and XREADGROUP).
const pipelineBroker = pipeline.Broker

// redisFlags are --pg and --redis, the servers of soak and bench: they
// drive the pipeline on Redis only.
func redisFlags(fs *flag.FlagSet, pg, redis *string) []runner.ServerFlag {
	k, _ := broker.Lookup(pipelineBroker)
	return []runner.ServerFlag{runner.PGFlag(fs, pg, false), runner.BrokerFlag(fs, k, redis, false)}
}

// checkURLs refuses a server URL that does not parse as a usage error (it
// used to be found by the client, as if the server had failed: exit 3),
// before anything connects or starts. A value that came from the
// environment is named by its variable. Secrets never show.
func checkURLs(fs *flag.FlagSet, stderr io.Writer, servers []runner.ServerFlag) bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, u := range servers {
		err := world.CheckURL(u.Kind, *u.URL)
		if err == nil {
			continue
		}
		name := "--" + u.Name
		if !set[u.Name] {
			name = u.Env + " (the default of --" + u.Name + ")"
		}
		fmt.Fprintf(stderr, "runner: %s: %s\n", name, safe.LongLine(err.Error()))
		return false
	}
	return true
}

// interrupted reports Ctrl-C once cleanup is done.
func interrupted(stderr io.Writer, kept bool) int {
	note := ""
	if kept {
		note = " (but what --keep kept)"
	}
	fmt.Fprintf(stderr, "runner: interrupted; everything the run created was removed%s\n", note)
	return exitInterrupted
}

// selection holds the raw selection flags until they are parsed.
type selection struct{ run, tags, skipTags, shard string }

func selectionFlags(fs *flag.FlagSet, p *runner.Params) *selection {
	var sel selection
	fs.StringVar(&sel.run, "run", "", "only scenarios whose name matches `REGEX`")
	fs.StringVar(&sel.tags, "tags", "", "only scenarios with at least one of these tags (`a,b`)")
	fs.StringVar(&sel.skipTags, "skip-tags", "", "no scenario with any of these tags (`c,d`)")
	fs.StringVar(&sel.shard, "shard", "", "only the K-th of N deterministic shards (`K/N`)")
	return &sel
}

// loadSelected loads the scenarios and applies the selection flags.
func loadSelected(ctx context.Context, paths []string, sel *selection, p *runner.Params, stderr io.Writer) ([]*scenario.Scenario, bool) {
	var err error
	if sel.run != "" {
		if p.Run, err = regexp.Compile(sel.run); err != nil {
			fmt.Fprintf(stderr, "runner: --run: %v\n", err)
			return nil, false
		}
	}
	if sel.shard != "" {
		if p.Shard, err = runner.ParseShard(sel.shard); err != nil {
			fmt.Fprintf(stderr, "runner: %v\n", err)
			return nil, false
		}
	}
	p.Tags, p.SkipTags = runner.SplitList(sel.tags), runner.SplitList(sel.skipTags)
	scs, ok := load(ctx, paths, stderr)
	if !ok {
		return nil, false
	}
	if len(runner.Matching(p, scs)) == 0 {
		fmt.Fprintln(stderr, "runner: no scenario matches the selection (--run, --tags, --skip-tags)")
		return nil, false
	}
	// An empty shard is normal when there are more shards than scenarios.
	return runner.Select(p, scs), true
}

// openReports creates the report files named (JUnit, JSON, Markdown); an
// empty name gives a nil file.
func openReports(paths []string) ([]*os.File, error) {
	files := make([]*os.File, len(paths))
	for i, path := range paths {
		if path == "" {
			continue
		}
		f, err := os.Create(path)
		if err != nil {
			closeAll(files)
			return nil, fmt.Errorf("report: %w", err)
		}
		files[i] = f
	}
	return files, nil
}

// writeReports writes rep into the open report files and closes them.
func writeReports(files []*os.File, rep *report.Report) error {
	defer closeAll(files)
	if rep == nil { // the run never started: no report rather than an empty one
		for _, f := range files {
			if f != nil {
				os.Remove(f.Name())
			}
		}
		return nil
	}
	rep.Version = version.String()
	var errs []error
	for i, write := range []func(io.Writer, *report.Report) error{report.WriteJUnit, report.WriteJSON, report.WriteMarkdown, report.WriteGuarantees} {
		if files[i] == nil {
			continue
		}
		if err := write(files[i], rep); err != nil {
			errs = append(errs, fmt.Errorf("report %s: %w", files[i].Name(), err))
		}
	}
	return errors.Join(errs...)
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate")
	p := world.Config{Parallel: 1}
	fs.StringVar(&p.PGURL, "pg", os.Getenv("RUNNER_PG_URL"), "check the system files' mappings on the PostgreSQL server at admin `URL` (env RUNNER_PG_URL); without it, on a server the runner starts")
	pg := []runner.ServerFlag{{Name: "pg", Env: "RUNNER_PG_URL", Kind: world.Postgres, URL: &p.PGURL}}
	connectTimeoutFlag(fs, &p.ConnectTimeout, pg)
	systemFile := fs.String("system", "", "the system `FILE` applies to every scenario, as with run; alone, validate checks that file")
	offline := fs.Bool("offline", false, "load and check the files only: no mapping is checked against a database")
	brokers := &listFlag{v: broker.Default()}
	fs.Var(brokers, "broker", "check what the services are given on `"+runner.BrokerChoices()+"` (or a list), as run with that --broker would: a ${…} that means nothing there is an error, as is a broker fault one of them does not take (without --broker, faults are checked on the system file's brokers:)")
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	runOn, err := runner.ParseBrokers(brokers.v)
	if err != nil {
		fmt.Fprintf(stderr, "runner validate: --broker: %v\n", err)
		return exitInvalid
	}
	if !*offline && !checkURLs(fs, stderr, pg) {
		return exitInvalid
	}
	scs, sys, ok := validateFiles(ctx, paths, *systemFile, runOn, brokers.set, stderr)
	if !ok {
		return loadFailed(ctx, stderr)
	}
	note := ""
	if !*offline {
		if code, done := checkMappings(ctx, p, scs, sys, &note, stderr); done {
			return code
		}
	}
	if len(scs) == 0 {
		fmt.Fprintf(stdout, "ok: %s valid%s\n", safe.Line(sys.File), note)
		return exitOK
	}
	fmt.Fprintf(stdout, "ok: %d scenario(s) valid%s\n", len(scs), note)
	return exitOK
}

// validateFiles loads the scenarios at paths (none when only a system
// file is given) and the system file, and checks them as run would on
// the brokers runOn (triggers: on the system files' brokers unless
// --broker was given): every problem of every file at once, each once,
// rather than a round per stage. A problem that leaves nothing to check
// (no scenario files, an unreadable --system) stops at once; ok false.
func validateFiles(ctx context.Context, paths []string, systemFile string, runOn []string, given bool, stderr io.Writer) ([]*scenario.Scenario, *system.System, bool) {
	var scs []*scenario.Scenario
	var errs diag.Errors
	if len(paths) > 0 || systemFile == "" {
		files, ok := scenarioFiles(paths, stderr)
		if !ok {
			return nil, nil, false
		}
		scs, errs = scenario.LoadFilesContext(ctx, files, kinds.All())
	}
	if ctx.Err() != nil {
		return nil, nil, false
	}
	sys, serrs, ok := systemProblems(ctx, scs, systemFile, stderr)
	if !ok {
		if ctx.Err() == nil && len(errs) > 0 {
			printErrors(errs, stderr)
		}
		return nil, nil, false
	}
	errs = append(errs, serrs...)
	if systemFile == "" || sys != nil { // a --system with problems is applied to nothing
		// What run would refuse before running anything: a ${…} a service
		// is given that names nothing on a broker of the run, a broker
		// fault a broker of the run does not take.
		var invalid *world.InvalidError
		if err := runner.CheckPlaceholders(scs, sys, runOn); errors.As(err, &invalid) {
			errs = append(errs, invalid.Errs...)
		}
		errs = append(errs, runner.CheckTriggers(scs, runOn, given)...)
	}
	if errs = uniqueErrors(errs); len(errs) > 0 {
		return nil, nil, printErrors(errs, stderr)
	}
	return scs, sys, true
}

// uniqueErrors are errs sorted, each problem once (the variants of a
// matrix, the scenarios of one system file, repeat them).
func uniqueErrors(errs diag.Errors) diag.Errors {
	seen := map[string]bool{}
	out := errs[:0]
	for _, e := range errs {
		if !seen[e.Error()] {
			seen[e.Error()] = true
			out = append(out, e)
		}
	}
	out.Sort()
	return out
}

// checkMappings checks the system files' mappings against their schema on
// a PostgreSQL, for validate. Without --pg and without a server of its own
// (no PostgreSQL installed), the files are still valid as far as loading
// tells: said on stderr, not an error.
func checkMappings(ctx context.Context, p world.Config, scs []*scenario.Scenario, sys *system.System, note *string, stderr io.Writer) (code int, done bool) {
	checked, err := world.CheckSystems(ctx, p, scs, sys)
	var invalid *world.InvalidError
	switch {
	case ctx.Err() != nil:
		return interrupted(stderr, false), true
	case errors.As(err, &invalid):
		printErrors(invalid.Errs, stderr)
		return exitInvalid, true
	case err != nil && p.PGURL != "":
		fmt.Fprintf(stderr, "runner: %s\n", safe.Text(err.Error()))
		return exitEnvironment, true
	case err != nil:
		fmt.Fprintf(stderr, "runner: note: the system files' mappings were not checked against their schema (no PostgreSQL: give --pg URL): %s\n", safe.Text(err.Error()))
	case len(checked) > 0:
		*note = fmt.Sprintf("; mappings checked against their schema: %s", safe.Line(strings.Join(checked, ", ")))
	}
	return exitOK, false
}

func cmdList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("list")
	var p runner.Params
	sel := selectionFlags(fs, &p)
	systemFile := fs.String("system", "", "list what run --system `FILE` would run: the system file applied to every scenario, checked as run checks it, and its services")
	brokers := &listFlag{v: broker.Default()}
	fs.Var(brokers, "broker", "the brokers run would run on (`"+runner.BrokerChoices()+"`, or a list), as run's --broker: the BROKERS column says where a scenario would be skipped before it starts")
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	var err error
	if p.Brokers, err = runner.ParseBrokers(brokers.v); err != nil {
		fmt.Fprintf(stderr, "runner list: %v\n", err)
		return exitInvalid
	}
	p.BrokerGiven = brokers.set
	scs, ok := loadSelected(ctx, paths, sel, &p, stderr)
	if !ok {
		return loadFailed(ctx, stderr)
	}
	sys, ok := loadSystem(ctx, scs, *systemFile, stderr)
	if !ok {
		return loadFailed(ctx, stderr)
	}
	listScenarios(stdout, &p, scs)
	if sys != nil {
		listServices(stdout, sys)
	}
	return exitOK
}

// listScenarios prints each scenario's file, name and tags, and the
// brokers run would run it on (each it would skip before it starts
// marked, the reasons said once below).
func listScenarios(w io.Writer, p *runner.Params, scs []*scenario.Scenario) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tNAME\tTAGS\tBROKERS")
	var why []string
	for _, sc := range scs {
		tags := make([]string, len(sc.Tags))
		for i, t := range sc.Tags {
			tags[i] = safe.Line(t)
		}
		var on []string
		for _, pl := range p.Plan(sc) {
			if pl.Skip == "" {
				on = append(on, pl.Broker)
				continue
			}
			if !slices.Contains(why, pl.Skip) {
				why = append(why, pl.Skip)
			}
			on = append(on, fmt.Sprintf("%s (skipped: %d)", pl.Broker, slices.Index(why, pl.Skip)+1))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", safe.Line(sc.File), safe.Line(sc.Name), strings.Join(tags, ","), strings.Join(on, ", "))
	}
	_ = tw.Flush()
	for i, s := range why {
		fmt.Fprintf(w, "skipped %d: %s\n", i+1, safe.LongLine(s))
	}
}

// listServices prints the services of the system file list --system
// applies: what each scenario's start steps start, and on which brokers.
func listServices(w io.Writer, sys *system.System) {
	brokers := "every broker"
	if sys.Brokers != nil {
		brokers = strings.Join(sys.Brokers, ", ")
	}
	fmt.Fprintf(w, "\nsystem %s (brokers: %s)\n", safe.Line(sys.File), brokers)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tRUN\tREADY\tVARIANTS")
	for _, name := range sys.Names() {
		s := sys.Services[name]
		ready := readyText(s)
		variants := slices.Sorted(maps.Keys(s.Variants))
		if len(variants) == 0 {
			variants = []string{"-"}
		}
		if s.Group != "" { // start/stop/kill: GROUP act on all of its replicas
			name += fmt.Sprintf(" (replica %d of %d: %s)", s.Replica, len(sys.Groups[s.Group]), s.Group)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", safe.Line(name), safe.Line(redact.NewSet().Text(strings.Join(s.Run, " "))), safe.Line(ready), strings.Join(variants, ","))
	}
	_ = tw.Flush()
}

// readyText is when a start of s goes on, as list --system shows it: `log
// "ready"`, `on broker.request(XREADGROUP)`, both, or "once started".
func readyText(s *system.Service) string {
	var parts []string
	if s.Ready != "" {
		parts = append(parts, fmt.Sprintf("log %q", s.Ready))
	}
	if s.ReadyOn != nil {
		parts = append(parts, "on "+s.ReadyOn.On())
	}
	if len(parts) == 0 {
		return "once started"
	}
	return strings.Join(parts, " and ")
}

func cmdDocs(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if code, done := noArgs(newFlags("docs"), args, stdout, stderr, "runner docs > docs/scenario-language.md"); done {
		return code
	}
	fmt.Fprint(stdout, scenario.Reference())
	return exitOK
}

func cmdClean(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("clean")
	var pg string
	servers := append([]runner.ServerFlag{runner.PGFlag(fs, &pg, true)}, runner.BrokerFlags(fs, true)...)
	var connectTimeout time.Duration
	connectTimeoutFlag(fs, &connectTimeout, servers)
	if code, done := noArgs(fs, args, stdout, stderr, "runner clean "+runner.ServerArgs()); done {
		return code
	}
	if !checkURLs(fs, stderr, servers) {
		return exitInvalid
	}
	// A wrong server is named in seconds, before anything is removed.
	for _, s := range servers {
		if *s.URL == "" {
			continue
		}
		if err := world.Probe(ctx, s.Kind, *s.URL, connectTimeout); err != nil {
			fmt.Fprintf(stderr, "runner: %v\n", err)
			return exitEnvironment
		}
	}
	local, err := world.CleanTempDirs()
	for _, p := range local.Killed {
		fmt.Fprintln(stdout, "killed", p)
	}
	dirs := local.Removed
	for _, d := range dirs {
		fmt.Fprintln(stdout, "removed", d)
	}
	for _, r := range local.Refused {
		fmt.Fprintln(stdout, "not this user's runner's:", r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitEnvironment
	}
	c, err := world.Clean(ctx, pg, runner.URLs(servers))
	c.Dropped = append(dirs, c.Dropped...)
	c.Live = append(local.Live, c.Live...)
	for _, d := range c.Dropped[len(dirs):] {
		fmt.Fprintln(stdout, "removed", d)
	}
	for _, d := range c.InUse {
		fmt.Fprintln(stdout, "in use, left alone:", d)
	}
	for _, d := range c.Live {
		fmt.Fprintln(stdout, "live run, left alone:", d)
	}
	for _, n := range c.Notes {
		fmt.Fprintln(stdout, "note:", n)
	}
	fmt.Fprintf(stdout, "%d removed, %d in use, %d of live runs", len(c.Dropped), len(c.InUse), len(c.Live))
	if len(local.Killed) > 0 {
		fmt.Fprintf(stdout, ", %d processes of dead runs killed", len(local.Killed))
	}
	fmt.Fprintln(stdout)
	if err != nil {
		fmt.Fprintf(stderr, "runner: %v\n", err)
		return exitEnvironment
	}
	return exitOK
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench")
	var p bench.Params
	countFlag(fs, &p.SoakEvents, "soak-events", 2000, 0, "`N` events for the soak and raw baseline figures (0: skip)")
	growth := fs.String("growth", "10,100,1000", "generated scenario `COUNTS` for the growth figures (comma-separated, each 1 to 1000)")
	countFlag(fs, &p.Repeat, "repeat", 3, 1, "`N` runs per start, library and soak figure; the median is printed (the soak's ratios: min / median / max)")
	only := fs.String("only", "", "measure only these `SECTIONS`, comma-separated: "+strings.Join(bench.Sections, ", ")+" (default all)")
	servers := redisFlags(fs, &p.PGURL, &p.Redis)
	for _, k := range broker.Kinds() { // the other brokers: the proxy figures only
		if k.Name != pipelineBroker {
			servers = append(servers, runner.BrokerFlag(fs, k, new(string), false))
		}
	}
	connectTimeoutFlag(fs, &p.ConnectTimeout, servers)
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	if !checkURLs(fs, stderr, servers) {
		return exitInvalid
	}
	p.URLs = runner.URLs(servers)
	for _, name := range runner.SplitList(*only) {
		if !slices.Contains(bench.Sections, name) {
			fmt.Fprintf(stderr, "runner: --only: %q is not one of %s\n", name, strings.Join(bench.Sections, ", "))
			return exitInvalid
		}
		p.Only = append(p.Only, name)
	}
	for _, n := range runner.SplitList(*growth) {
		var k int
		if _, err := fmt.Sscan(n, &k); err != nil || k < 1 || k > 1000 {
			fmt.Fprintf(stderr, "runner: --growth: %q is not a count from 1 to 1000\n", n)
			return exitInvalid
		}
		p.Growth = append(p.Growth, k)
	}
	// Only the library's wall time runs scenario files: the other sections
	// need no scenarios/ directory where the binary runs.
	if len(p.Only) == 0 || slices.Contains(p.Only, "library") {
		var ok bool
		if p.Scenarios, ok = load(ctx, paths, stderr); !ok {
			return loadFailed(ctx, stderr)
		}
	} else if len(paths) > 0 {
		fmt.Fprintf(stderr, "runner: bench: scenario paths are for the library section only; --only %s measures none\n", strings.Join(p.Only, ","))
		return exitInvalid
	}
	p.Explore = benchExplorer(p.PGURL, p.Redis)
	if err := bench.Run(ctx, p, stdout); err != nil {
		var internal *runner.InternalError
		if errors.As(err, &internal) {
			return internalError(stderr, []string{"bench"}, internal.Value, internal.Stack)
		}
		fmt.Fprintf(stderr, "runner: bench: %v\n", err)
		switch {
		case ctx.Err() != nil:
			return exitInterrupted
		case errors.Is(err, bench.ErrScenariosFailed):
			return exitFailed
		}
		return exitEnvironment
	}
	return exitOK
}

func cmdSchema(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("schema")
	sys := fs.Bool("system", false, "the schema of a team's system file instead (docs/system.schema.json)")
	if code, done := noArgs(fs, args, stdout, stderr, "runner schema [--system] > docs/scenario.schema.json"); done {
		return code
	}
	if *sys {
		_, _ = stdout.Write(system.JSONSchema())
		return exitOK
	}
	_, _ = stdout.Write(scenario.Schema())
	return exitOK
}

// noArgs parses the flags of a command that takes no file arguments.
func noArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, use string) (code int, done bool) {
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if !done && len(paths) > 0 {
		fmt.Fprintf(stderr, "runner %s: unexpected argument %q\nusage: %s\n", fs.Name(), paths[0], use)
		return exitInvalid, true
	}
	return code, done
}

func countFiles(errs diag.Errors) int {
	files := map[string]bool{}
	for _, e := range errs {
		files[e.Pos.File] = true
	}
	return len(files)
}

// listFlag is a comma-separated list flag that a second use extends
// (--broker redis --broker nats is redis,nats) instead of replacing.
type listFlag struct {
	v   string
	set bool
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return l.v
}

func (l *listFlag) Set(s string) error {
	if l.set {
		l.v += "," + s
	} else {
		l.v, l.set = s, true
	}
	return nil
}
