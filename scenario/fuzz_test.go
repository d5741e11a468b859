package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxdrill/runner/diag"

	"gopkg.in/yaml.v3"
)

// FuzzParse feeds the loader arbitrary files: it must never panic, and every
// problem, YAML syntax errors included, must come with a line and column
// inside the file.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../scenarios/*/*.yaml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("name: x\nvars: {a: 1}\nmatrix: {b: [1, 2]}\nsteps:\n  - produce: {amount: \"${a}\"}\n  - expect: {within: 1s, stream.entries: 1}\n"))
	f.Add([]byte("name: x\nx-b: &b {amount: 5}\nsteps:\n  - produce: {<<: *b}\n  - relay(limit=1, skip_mark)\n"))
	f.Add([]byte("name: x\nsteps:\n  - produce: {amount: 5\n  - relay\n"))
	f.Add([]byte("name: x\nsteps:\n  - consume:\n      consumer: a\n     expect: {applied: 1}\n"))
	f.Add([]byte("name: x\nsteps:\n  - relay\n\t- produce\n"))
	// The hardening inputs: control characters in a name, an over-long or
	// badly-shaped consumer id, a clash of handling modes, a huge event id.
	f.Add([]byte("name: \"a\\x1b[2J\\r\\nFAKE: ok\\x00\"\nsteps:\n  - produce\n"))
	f.Add([]byte("name: x\nsteps:\n  - consume: {consumer: " + strings.Repeat("c", 300) + "}\n  - claim(consumer=a.b)\n"))
	f.Add([]byte("name: x\nsteps:\n  - consume(ordering=strict, mode=split_tx, dedupe=setnx, fail=divzero)\n"))
	f.Add([]byte("name: x\nsteps:\n  - produce: {event: " + strings.Repeat("e", 5000) + "}\n  - sleep\n  - broker\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		scs, errs := Parse("f.yaml", data, testKinds)
		lines := strings.Split(strings.TrimSuffix(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n"), "\n")
		for _, e := range errs {
			if e.Pos.File != "f.yaml" || e.Pos.Line < 1 || e.Pos.Line > len(lines) || e.Pos.Col < 1 ||
				e.Pos.Col > utf8.RuneCountInString(lines[e.Pos.Line-1])+1 || e.Msg == "" {
				t.Fatalf("problem without a position in the file, or without text: %#v", e)
			}
		}
		if len(errs) == 0 {
			for _, sc := range scs {
				if sc.Name == "" || len(sc.Steps) == 0 {
					t.Fatalf("accepted a scenario without name or steps: %#v", sc)
				}
			}
		}
	})
}

// FuzzShorthand feeds the `step(key=value, ...)` parser arbitrary strings.
func FuzzShorthand(f *testing.F) {
	for _, s := range []string{"relay", "relay(skip_mark)", "consume(fail=divzero, count=2)", `produce(event="a,b", currency='EUR')`,
		"claim(idle=0)", "relay()", "relay (limit=1)", `produce(event="open)`, "x(,,=)", "(", "a(b=c=d)"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, col int) {
		n := &yaml.Node{Kind: yaml.ScalarNode, Value: s, Line: 1, Column: 1 + (col%200+200)%200}
		name, args, errs := parseShorthand("f.yaml", n)
		if len(errs) > 0 {
			for _, e := range errs {
				if e.Pos.Line != 1 || e.Pos.Col < 1 {
					t.Fatalf("bad position %v for %q", e.Pos, s)
				}
			}
			return
		}
		if name == "" || !strings.HasPrefix(strings.TrimSpace(s), name) {
			t.Fatalf("%q parsed as step %q", s, name)
		}
		for _, a := range args {
			if a.Value == nil || a.Value.Column < 1 {
				t.Fatalf("%q: argument %q without a positioned value", s, a.Key)
			}
		}
		// Whatever it parsed, building the step must not panic either.
		_, _ = buildCall("f.yaml", diag.NodePos("f.yaml", n), name, args, nil, "", kindNames(testKinds))
	})
}
