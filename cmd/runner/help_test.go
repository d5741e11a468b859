package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpForms are the argument lists that print each flag set's help: every
// command's, and the flag sets a command picks by its arguments.
func helpForms() [][]string {
	var forms [][]string
	for _, name := range commandNames() {
		if name != "help" {
			forms = append(forms, []string{name, "--help"})
		}
	}
	return append(forms, []string{"explore", "merge", "--help"}, []string{"soak", "--in-process", "--help"})
}

// helpOf runs args (ending in --help) and returns the help and the flag
// set it was printed for.
func helpOf(t *testing.T, args []string) (string, *flag.FlagSet) {
	t.Helper()
	var shown *flag.FlagSet
	helpShown = func(fs *flag.FlagSet) { shown = fs }
	defer func() { helpShown = nil }()
	code, out, errs := run0(args...)
	if code != 0 || errs != "" || shown == nil {
		t.Fatalf("%v: exit %d, stderr %q, no flag set shown: %v", args, code, errs, shown == nil)
	}
	return out, shown
}

var headingLine = regexp.MustCompile(`^([A-Z][a-z ]+):$`)

// TestHelpEveryFlagUnderAHeading: each flag a command defines is printed
// once, in the docs' --flag spelling, under one of the headings (none
// under "Other", where an unplaced flag lands), and each command has
// examples.
func TestHelpEveryFlagUnderAHeading(t *testing.T) {
	for _, args := range helpForms() {
		out, fs := helpOf(t, args)
		under := map[string][]string{} // flag → headings it is printed under
		heading := ""
		for _, line := range strings.Split(out, "\n") {
			if m := headingLine.FindStringSubmatch(line); m != nil {
				heading = m[1]
				continue
			}
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  -") {
				under[f[0]] = append(under[f[0]], heading)
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			name := dashed(f.Name)
			hs := under[name]
			if len(hs) != 1 || !slices.Contains(headingOrder, hs[0]) {
				t.Errorf("%v: %s printed under %q, want once under one of %v", args, name, hs, headingOrder)
			}
			delete(under, name)
		})
		for name := range under {
			t.Errorf("%v: help prints %s, which the command does not define", args, name)
		}
		if regexp.MustCompile(`(?m)^  -[a-z][a-z]`).MatchString(out) {
			t.Errorf("%v: a flag spelt Go's way (-flag), not --flag:\n%s", args, out)
		}
		if !strings.Contains(out, "\nExamples:\n  runner ") && !strings.Contains(out, "\nExamples:\n  DATABASE_URL=") {
			t.Errorf("%v: no examples:\n%s", args, out)
		}
	}
}

// TestHelpSeedIsRandom: a default drawn per run is shown as random, not as
// the number this process drew.
func TestHelpSeedIsRandom(t *testing.T) {
	for _, args := range [][]string{{"soak", "--help"}, {"explore", "--help"}, {"soak", "--in-process", "--help"}} {
		out, _ := helpOf(t, args)
		i := strings.Index(out, "  --seed")
		if i < 0 || !strings.Contains(out[i:i+strings.Index(out[i+2:], "\n  -")+2], "(default random)") {
			t.Errorf("%v: --seed's default is not shown as random:\n%s", args, out)
		}
	}
}

// exampleArgs are the arguments of example line e for Main: its leading
// VAR=value words and "runner" dropped, and what a shell redirects.
func exampleArgs(t *testing.T, e string) []string {
	t.Helper()
	var words []string
	for _, m := range regexp.MustCompile(`'[^']*'|\S+`).FindAllString(e, -1) {
		words = append(words, strings.Trim(m, "'"))
	}
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 || words[0] != "runner" {
		t.Fatalf("example %q does not run runner", e)
	}
	words = words[1:]
	if i := slices.Index(words, ">"); i >= 0 {
		words = words[:i]
	}
	return words
}

// parseExample runs example e's flags through its command's flag set
// (e with --help: the flags parse, or it is a usage error) and checks the
// files and directories it reads are in this repository. "" when all is
// well, else what is wrong.
func parseExample(t *testing.T, cmd, e string) string {
	args := exampleArgs(t, e)
	if !slices.Equal(args[:len(strings.Fields(cmd))], strings.Fields(cmd)) {
		return "it runs another command"
	}
	if cmd == "help" || cmd == "version" {
		if code, _, errs := run0(args...); code != 0 {
			return errs
		}
		return ""
	}
	var shown *flag.FlagSet
	helpShown = func(fs *flag.FlagSet) { shown = fs }
	defer func() { helpShown = nil }()
	code, _, errs := run0(append(args, "--help")...)
	if code != 0 || shown == nil {
		return strings.TrimSpace(errs)
	}
	if !slices.Contains([]string{"run", "validate", "list", "explore"}, cmd) {
		return ""
	}
	for i := len(strings.Fields(cmd)); i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			f := shown.Lookup(strings.TrimLeft(a, "-"))
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool && !strings.Contains(a, "=") {
				if a == "--system" {
					if _, err := os.Stat(filepath.Join("..", "..", args[i+1])); err != nil {
						return err.Error()
					}
				}
				i++ // its value
			}
			continue
		}
		if _, err := os.Stat(filepath.Join("..", "..", a)); err != nil {
			return err.Error()
		}
	}
	return ""
}

// TestHelpExamplesParse: every example of every command is a command line
// that command takes, on files of this repository.
func TestHelpExamplesParse(t *testing.T) {
	for _, name := range append(commandNames(), "explore merge") {
		if len(examples[name]) == 0 {
			t.Errorf("%s has no example", name)
		}
		for _, e := range examples[name] {
			if why := parseExample(t, name, e); why != "" {
				t.Errorf("%s: example %q: %s", name, e, why)
			}
		}
	}
	// The check can fail: a flag the command lacks, a file not there.
	for _, bad := range []string{"runner run --nope scenarios/", "runner run scenarios/nowhere/", "runner list --system nowhere.yaml scenarios/"} {
		if parseExample(t, "run", strings.Replace(bad, "runner list", "runner run", 1)) == "" {
			t.Errorf("example %q passed", bad)
		}
	}
}
