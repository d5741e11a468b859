package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outboxdrill/runner/internal/redact"
)

// Flag headings, in the order a command's help prints them. Every flag of
// every command sits under one (TestHelpEveryFlagUnderAHeading): a flag
// list of thirty names is read by what it is for, not alphabetically.
const (
	hSelection = "Selection"
	hRun       = "Run"
	hSystem    = "System"
	hPoints    = "Points"
	hRandom    = "Random"
	hShards    = "Shards"
	hInProcess = "In process"
	hMeasure   = "Measure"
	hServices  = "Services"
	hSchema    = "Schema"
	hProcess   = "Process"
	hOutput    = "Output"
	hReports   = "Reports"
	hServers   = "Servers"
)

var headingOrder = []string{hSelection, hRun, hSystem, hPoints, hRandom, hShards, hInProcess, hMeasure,
	hServices, hSchema, hProcess, hOutput, hReports, hServers}

// flagHeadings is where a flag goes when its command says nothing else:
// a flag means the same on every command that has it.
var flagHeadings = map[string]string{
	"pg": hServers, "redis": hServers, "nats": hServers, "rabbitmq": hServers, "kafka": hServers, "connect-timeout": hServers,
	"run": hSelection, "tags": hSelection, "skip-tags": hSelection, "shard": hSelection,
	"junit": hReports, "json": hReports, "markdown": hReports, "html": hReports, "html-dir": hReports, "guarantees": hReports,
	"broker": hRun, "parallel": hRun, "timeout": hRun, "settle": hRun, "fail-fast": hRun, "keep": hRun, "v": hRun,
	"repeat": hRun, "budget": hRun, "system": hSystem, "out": hOutput,
	"random": hRandom, "seed": hRandom, "faults": hRandom, "events": hRandom,
	"in-process": hInProcess, "batch": hInProcess, "baseline": hInProcess, "crash": hInProcess, "with": hInProcess,
}

// commandHeadings override flagHeadings for one command (by its flag
// set's name).
var commandHeadings = map[string]map[string]string{
	"explore": {"actions": hPoints, "depth": hPoints, "nth-cap": hPoints, "confirm": hPoints, "only": hPoints,
		"shard": hShards, "map": hShards, "map-only": hShards, "broker": hSystem},
	"soak": {"actions": hPoints, "depth": hPoints, "nth-cap": hPoints, "confirm": hPoints, "only": hPoints,
		"shard": hShards, "map": hShards, "map-only": hShards, "broker": hSystem},
	"bench": {"soak-events": hMeasure, "growth": hMeasure, "repeat": hMeasure, "only": hMeasure},
	"init": {"relay": hServices, "consumer": hServices, "compose": hServices, "relay-service": hServices,
		"consumer-service": hServices, "broker": hServices, "schema-producer": hSchema, "schema-consumer": hSchema,
		"outbox": hSchema, "inbox": hSchema, "force": hOutput},
	"reference": {"interval": hProcess, "claim-idle": hProcess, "ack-first": hProcess},
	"validate":  {"offline": hRun},
	"schema":    {"system": hOutput},
}

// headingOf is the heading flag name goes under in command cmd's help;
// "" when none says (a test fails on it).
func headingOf(cmd, name string) string {
	if h, ok := commandHeadings[cmd][name]; ok {
		return h
	}
	return flagHeadings[name]
}

// examples are real command lines for each command, each working on this
// repository (TestHelpExamplesParse runs their flags through the
// command's flag set).
var examples = map[string][]string{
	"run": {
		"runner run scenarios/seed/",
		"runner run --broker redis,nats --tags seed --json report.json --html report.html scenarios/",
		"runner run --repeat 5 --run 'relay crashes' scenarios/seed/",
		"runner run --system examples/go-payments/system.yaml examples/go-payments/scenarios/",
	},
	"validate": {
		"runner validate --offline scenarios/",
		"runner validate --system examples/go-payments/system.yaml examples/go-payments/scenarios/",
	},
	"list": {
		"runner list --tags seed scenarios/",
		"runner list --system examples/go-payments/system.yaml examples/go-payments/scenarios/",
	},
	"schema":  {"runner schema > docs/scenario.schema.json", "runner schema --system > docs/system.schema.json"},
	"docs":    {"runner docs > docs/scenario-language.md"},
	"clean":   {"runner clean --pg postgres://postgres@127.0.0.1:5432/postgres --redis redis://127.0.0.1:6379"},
	"version": {"runner version"},
	"help":    {"runner help run"},
	"init": {
		"runner init --relay 'DATABASE_URL=${producer_db.url} REDIS_URL=${broker.url} STREAM=${stream} python3 -u relay.py' " +
			"--consumer 'DATABASE_URL=${consumer_db.url} REDIS_URL=${broker.url} STREAM=${stream} GROUP=${group} python3 -u consumer.py' " +
			"--schema-producer examples/python/producer.sql --schema-consumer examples/python/consumer.sql --out drill/",
	},
	"explore": {
		"runner explore --system examples/go-payments/system.yaml --out found/",
		"runner explore --system examples/go-payments/system.yaml --out found/ --random --seed 7 --events 200 --faults 0.05",
		"runner explore --system examples/go-payments/system.yaml --out found/ --shard 1/4 --json shard-1.json",
	},
	"explore merge": {"runner explore merge --out found/ --json explore.json shard-1/ shard-2/"},
	"soak":          {"runner soak --events 200 --seed 7", "runner soak --in-process --events 1000 --faults 0.1 --seed 42 --crash"},
	"bench":         {"runner bench --only start,isolation --repeat 1"},
	"reference": {
		"DATABASE_URL=postgres://postgres@127.0.0.1:5432/shop REDIS_URL=redis://127.0.0.1:6379 STREAM=events runner reference relay",
	},
}

// helpShown, when set (by a test), is given the flag set whose help is
// printed: the flags a command really defines, to hold its help against.
var helpShown func(*flag.FlagSet)

// commandUsage prints "usage: runner NAME ARGS", what the command does,
// its flags under their headings, in the docs' --flag spelling, and
// examples.
func commandUsage(w io.Writer, fs *flag.FlagSet) {
	if helpShown != nil {
		helpShown(fs)
	}
	h := usageOf(fs.Name())
	fmt.Fprintf(w, "usage: runner %s %s\n\n%s\n", fs.Name(), h.args, h.summary)
	groups := map[string][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) {
		g := headingOf(fs.Name(), f.Name)
		if g == "" {
			g = "Other" // a flag no heading was given for: shown, and TestHelp… fails
		}
		groups[g] = append(groups[g], f)
	})
	for _, g := range append(slices.Clone(headingOrder), "Other") {
		if len(groups[g]) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", g)
		for _, f := range groups[g] {
			printFlag(w, f)
		}
	}
	if ex := examples[fs.Name()]; len(ex) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range ex {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// printFlag prints one flag as the docs write it: --name ARG, then what
// it does, wrapped, and its default.
func printFlag(w io.Writer, f *flag.Flag) {
	arg, usage := flag.UnquoteUsage(f)
	// Go's names for a value whose usage gives no `NAME`, as the docs write one.
	if a, ok := map[string]string{"int": "N", "uint": "N", "duration": "DURATION", "float": "NUMBER", "string": "VALUE", "value": "VALUE"}[arg]; ok {
		arg = a
	}
	line := "  " + dashed(f.Name)
	if arg != "" {
		line += " " + arg
	}
	// A default from RUNNER_PG_URL and friends may hold a password.
	if def := redact.URL(f.DefValue); !zeroDefault(def) {
		usage += " (default " + def + ")"
	}
	fmt.Fprintln(w, line)
	for _, l := range wrap(usage, 92) {
		fmt.Fprintf(w, "        %s\n", l)
	}
}

// dashed is a flag as the docs write it: --name, and -v for a one-letter one.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// zeroDefault: a default not worth saying (the flag is off or empty).
func zeroDefault(def string) bool {
	return def == "" || def == "false" || def == "0s" || def == "[]"
}

// wrap breaks s into lines of at most width bytes, at spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(lines, line)
}

// seedFlag defines --seed, whose default is drawn at random for each run:
// help says "random", not the number this process happened to draw.
func seedFlag(fs *flag.FlagSet, p *uint64, value uint64, usage string) {
	fs.Uint64Var(p, "seed", value, usage)
	fs.Lookup("seed").DefValue = "random"
}
