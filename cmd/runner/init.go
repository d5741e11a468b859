package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/outboxdrill/runner/world"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scaffold"
)

const initUsage = "runner init --relay 'CMD…' --consumer 'CMD…' --schema-producer FILE --schema-consumer FILE [--broker KIND] [--out DIR] [--force] (or --compose FILE [--relay-service NAME] [--consumer-service NAME] for the command lines)"

// initFlags are init's flags, parsed.
type initFlags struct {
	relay, consumer string
	// compose names a docker-compose file whose services give the
	// command lines instead (--relay-service, --consumer-service).
	compose, relayService, consumerService string
	p                                      scaffold.Params
	servers                                []runner.ServerFlag
}

func cmdInit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	began := time.Now()
	fs := newFlags("init")
	f := defineInitFlags(fs)
	paths, code, done := parseArgs(fs, args, stdout, stderr)
	if done {
		return code
	}
	if !initInput(ctx, fs, f, paths, stderr) {
		return exitInvalid
	}
	f.p.Log, f.p.Runner.Out = stdout, stdout
	in, err := scaffold.Open(ctx, f.p)
	if err != nil {
		return initFailed(ctx, err, stderr)
	}
	defer func() {
		if err := in.Close(); err != nil {
			fmt.Fprintf(stderr, "runner init: %s\n", safe.Text(err.Error()))
		}
	}()
	plan, notes, err := in.Infer(ctx)
	for _, n := range notes {
		fmt.Fprintf(stdout, "init: note: %s\n", safe.LongLine(n))
	}
	if err != nil {
		return initFailed(ctx, err, stderr)
	}
	files, err := in.Write(plan)
	if err != nil {
		return initFailed(ctx, err, stderr)
	}
	fmt.Fprintf(stdout, "init: wrote %s\n", safe.LongLine(strings.Join(files, ", ")))
	return initDrill(ctx, in, f, files, began, stdout, stderr)
}

// initDrill validates what init wrote, as `runner validate --system`
// does, and runs its fault-free scenario.
func initDrill(ctx context.Context, in *scaffold.Init, f *initFlags, files []string, began time.Time, stdout, stderr io.Writer) int {
	scenarios := filepath.Dir(files[1])
	fmt.Fprintf(stdout, "init: runner validate --system %s --broker %s %s\n", files[0], f.p.Broker, scenarios)
	var out strings.Builder
	if code := cmdValidate(ctx, []string{"--system", files[0], "--pg", in.PGURL(), "--broker", f.p.Broker, scenarios}, &out, stderr); code != exitOK {
		return code
	}
	fmt.Fprint(stdout, "init: "+out.String())
	fmt.Fprintf(stdout, "init: the fault-free drill, %s:\n", filepath.Join(scenarios, scaffold.FaultFree))
	rep, err := in.Drill(ctx)
	switch {
	case ctx.Err() != nil:
		return interrupted(stderr, false)
	case err != nil:
		return initFailed(ctx, err, stderr)
	}
	fmt.Fprintln(stdout, rep.Summary())
	if rep.Failed() > 0 || len(rep.Results) == 0 || rep.Results[0].Skipped != "" {
		fmt.Fprintf(stdout, "init: the fault-free drill did not pass: check the keys its failure names in %s\n", files[0])
		return exitFailed
	}
	fmt.Fprintf(stdout, "init: first green drill %s after init began; next, the seed's windows: runner run %s\n", time.Since(began).Round(100*time.Millisecond), scenarios)
	return exitOK
}

// initFailed reports an error of init: what it could not infer (exit 2),
// or the servers (exit 3).
func initFailed(ctx context.Context, err error, stderr io.Writer) int {
	var input *scaffold.InputError
	var invalid *world.InvalidError
	switch {
	case ctx.Err() != nil:
		return interrupted(stderr, false)
	case errors.As(err, &input):
		for _, p := range input.Problems {
			fmt.Fprintf(stderr, "runner init: %s\n", safe.Text(p))
		}
		fmt.Fprintf(stderr, "runner init: %d problem(s); nothing was written\n", len(input.Problems))
		return exitInvalid
	case errors.As(err, &invalid):
		printErrors(invalid.Errs, stderr)
		return exitInvalid
	}
	fmt.Fprintf(stderr, "runner init: %s\n", safe.Text(err.Error()))
	return exitEnvironment
}

func defineInitFlags(fs *flag.FlagSet) *initFlags {
	f := &initFlags{}
	fs.StringVar(&f.relay, "relay", "", "the relay's command line (`CMD`), its environment first as sh takes it: 'DATABASE_URL=${producer_db.url} REDIS_URL=${broker.url} STREAM=${stream} python3 relay.py' (the placeholders of a system file's services; run where init runs)")
	fs.StringVar(&f.consumer, "consumer", "", "the consumer's command line (`CMD`), as --relay: 'DATABASE_URL=${consumer_db.url} REDIS_URL=${broker.url} STREAM=${stream} GROUP=${group} python3 consumer.py'")
	fs.StringVar(&f.compose, "compose", "", "take the command lines from the docker-compose `FILE`'s services (--relay-service, --consumer-service) instead: their entrypoint and command run here, from their build context, their environment's server URLs made the proxies' placeholders")
	fs.StringVar(&f.relayService, "relay-service", "relay", "with --compose: the relay's `SERVICE`")
	fs.StringVar(&f.consumerService, "consumer-service", "consumer", "with --compose: the consumer's `SERVICE`")
	fs.StringVar(&f.p.Schemas[0], "schema-producer", "", "the producer's schema (`FILE`: the DDL of its outbox)")
	fs.StringVar(&f.p.Schemas[1], "schema-consumer", "", "the consumer's schema (`FILE`: the DDL of its inbox and read model)")
	fs.StringVar(&f.p.Broker, "broker", broker.Default(), "the `broker` the services talk to: "+strings.Join(broker.Names(), ", "))
	fs.StringVar(&f.p.Outbox, "outbox", "", "the outbox `TABLE`, where several are shaped like one (init probes one: else the first)")
	fs.StringVar(&f.p.Inbox, "inbox", "", "the inbox `TABLE`, where several are shaped like one (else the one the consumer writes the probe to)")
	fs.StringVar(&f.p.Out, "out", ".", "write system.yaml and scenarios/ to `DIR` (created)")
	fs.BoolVar(&f.p.Force, "force", false, "overwrite the files init writes when they are there")
	f.servers = append([]runner.ServerFlag{runner.PGFlag(fs, &f.p.Runner.PGURL, false)}, runner.BrokerFlags(fs, false)...)
	connectTimeoutFlag(fs, &f.p.Runner.ConnectTimeout, f.servers)
	return f
}

// initCommands reads the two command lines: --relay and --consumer, or
// the --compose file's services.
func initCommands(ctx context.Context, f *initFlags) error {
	var err error
	if f.compose != "" {
		if f.p.Relay, err = scaffold.FromCompose(ctx, f.compose, f.relayService, "relay", f.p.Broker); err != nil {
			return fmt.Errorf("--compose: %w", err)
		}
		if f.p.Consumer, err = scaffold.FromCompose(ctx, f.compose, f.consumerService, "consumer", f.p.Broker); err != nil {
			return fmt.Errorf("--compose: %w", err)
		}
		return nil
	}
	if f.p.Relay, err = scaffold.ParseCommand(f.relay); err != nil {
		return fmt.Errorf("--relay: %w", err)
	}
	if f.p.Consumer, err = scaffold.ParseCommand(f.consumer); err != nil {
		return fmt.Errorf("--consumer: %w", err)
	}
	return nil
}

// initInput checks init's flags and reads the commands; a problem is
// said on stderr.
func initInput(ctx context.Context, fs *flag.FlagSet, f *initFlags, paths []string, stderr io.Writer) bool {
	usage := func(format string, args ...any) bool {
		fmt.Fprintf(stderr, "runner init: "+format+"\nusage: %s\n", append(args, initUsage)...)
		return false
	}
	switch {
	case len(paths) > 0:
		return usage("no file arguments, got %s", safe.Line(strings.Join(paths, " ")))
	case f.compose != "" && (f.relay != "" || f.consumer != ""):
		return usage("--compose gives the command lines: no --relay or --consumer with it")
	case f.compose == "" && (f.relay == "" || f.consumer == ""):
		return usage("--relay and --consumer are required: the command lines of your two services (or --compose FILE)")
	case f.p.Schemas[0] == "" || f.p.Schemas[1] == "":
		return usage("--schema-producer and --schema-consumer are required: the DDL files of the two databases")
	}
	if bs, err := runner.ParseBrokers(f.p.Broker); err != nil || len(bs) != 1 {
		return usage("--broker %q: want one broker, %s", safe.Line(f.p.Broker), strings.Join(broker.Names(), ", "))
	}
	if err := initCommands(ctx, f); err != nil {
		return usage("%s", safe.LongLine(err.Error()))
	}
	if !checkURLs(fs, stderr, f.servers) {
		return false
	}
	f.p.Runner.URLs = runner.URLs(f.servers)
	if there := scaffold.Existing(f.p); len(there) > 0 && !f.p.Force {
		return usage("%s: there already (--force overwrites)", safe.LongLine(strings.Join(there, ", ")))
	}
	return true
}
