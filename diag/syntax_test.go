package diag

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestLocate checks the exact line:col and message for each kind of syntax
// error; yaml.v3's own line is in the comment, for comparison.
func TestLocate(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		// yaml.v3: line 5: found a tab character that violates indentation
		{"tab before an item", "name: x\ntags: [a]\nsteps:\n  - produce\n  - relay\n\t- consume\n",
			"6:1: a tab in indentation; YAML indents with spaces"},
		// yaml.v3: line 5: found a tab character that violates indentation
		{"tab after spaces", "name: x\nsteps:\n  - produce\n  - consume:\n      consumer: a\n  \t  count: 1\n",
			"6:3: a tab in indentation; YAML indents with spaces"},
		// yaml.v3: line 5: found character that cannot start any token
		{"tab as the only indentation", "name: x\nsteps:\n  - produce\n  - consume:\n\tconsumer: a\n",
			"5:1: a tab in indentation; YAML indents with spaces"},
		// yaml.v3: line 2: found character that cannot start any token
		{"tab after a dash", "steps:\n  -\tproduce\n",
			"2:4: a tab in indentation; YAML indents with spaces"},
		// yaml.v3: line 3: found a tab character where an indentation space is expected
		{"tab in a block scalar", "name: x\nsteps:\n  - produce: |\n     a\n\tb\n  - relay\n",
			"5:1: a tab in indentation; YAML indents with spaces"},
		// yaml.v3: line 2: did not find expected ',' or '}'
		{"unclosed brace", "name: x\nsteps:\n  - produce: {amount: 5\n  - relay\n  - expect: {outbox.rows: 1}\n",
			`3:14: this "{" is never closed: no "}" after it`},
		// yaml.v3: line 3: did not find expected ',' or '}'
		{"a bare ${var} in a flow map", "name: x\nvars: {amt: 5}\nsteps:\n  - produce: {amount: ${amt}}\n",
			`4:23: invalid YAML: ${amt} inside {…} or […] must be quoted: write "${amt}" (its { would open a map)`},
		// yaml.v3: line 1: did not find expected ',' or ']'
		{"unclosed bracket", "name: x\ntags: [a, b\nsteps:\n  - produce\n",
			`2:7: this "[" is never closed: no "]" after it`},
		// yaml.v3: line 2: did not find expected ',' or ']'
		{"bracket closed by a brace", "name: x\nsteps:\n  - produce: {amount: [5}\n",
			`3:23: this "[" is never closed: the "}" at line 3, column 25 closes the "{" at line 3, column 14`},
		// yaml.v3: line 2: did not find expected ',' or '}'
		{"brace closed by a bracket", "name: x\nsteps:\n  - expect: {a: 1]\n  - relay\n",
			`3:18: this "]" does not close the "{" at line 3, column 13`},
		// yaml.v3: line 2: did not find expected key
		{"one brace too many", "name: x\nsteps:\n  - expect: {a: 1}}\n",
			`3:19: this "}" closes nothing: no "{" before it`},
		// yaml.v3: line 3: found unexpected end of stream
		{"unclosed quote", "name: \"x\nsteps: [relay]\n",
			"1:7: this double quote is never closed"},
		// yaml.v3: line 3: found unexpected end of stream
		{"unclosed quote in braces", "name: x\nsteps:\n  - produce: {amount: 5, event: \"a}\n  - relay\n",
			"3:33: this double quote is never closed"},
		// yaml.v3: line 5: did not find expected key
		{"key between two indentations", "name: x\ntags: [a]\nsteps:\n  - produce\n  - relay\n  - consume:\n      consumer: accounting\n     expect: {applied: 1}\n",
			`8:6: "expect:" at column 6 lines up with nothing: indent it to column 7 (like "consumer:", line 7) or column 5 (like "consume:", line 6)`},
		// yaml.v3: line 8: mapping values are not allowed in this context
		{"key too deep under a value", "name: x\ntags: [a]\nsteps:\n  - produce\n  - relay\n  - consume:\n      consumer: accounting\n        expect: {applied: 1}\n",
			`8:9: "expect:" is indented too deep: "consumer:" on line 7 already has a value, so a key of the same map goes at column 7`},
		// yaml.v3: line 5: did not find expected key
		{"step key too deep", "name: x\ntags: [a]\nsteps:\n  - produce\n  - relay\n  - consume: {consumer: accounting}\n    expect: {applied: 1}\n      expect: {applied: 2}\n",
			`8:7: "expect:" is indented too deep: "expect:" on line 7 already has a value, so a key of the same map goes at column 5`},
		// yaml.v3: line 4: mapping values are not allowed in this context
		{"key under a list item", "name: x\nsteps:\n  - relay\n   bad: [\n",
			`4:4: "bad:" is indented too deep: the list item before it already has a value; a new item starts with "- " at column 3, or, to give that item this key, end it with ":" (- relay:)`},
		// yaml.v3: line 4: mapping values are not allowed in this context
		{"a shorthand item without its colon", "name: x\nsteps:\n  - relay(skip_mark)\n    expect: {published: 1}\n",
			`4:5: "expect:" is indented too deep: the list item before it already has a value; a new item starts with "- " at column 3, or, to give that item this key, end it with ":" (- relay(skip_mark):)`},
		// yaml.v3: line 2: mapping values are not allowed in this context
		{"top-level key indented", "name: x\n  steps:\n  - relay\n",
			`2:3: "steps:" is indented too deep: "name:" on line 1 already has a value, so a key of the same map goes at column 1`},
		// yaml.v3: line 3: did not find expected key
		{"item between two indentations", "name: x\nsteps:\n  - relay\n - produce\n",
			`4:2: "-" at column 2 lines up with nothing: indent it to column 3 (like the "- " items, line 3) or column 1 (like "name:", line 1)`},
		// yaml.v3: line 2: did not find expected '-' indicator
		{"nested item between two indentations", "name: x\nsteps:\n  - relay\n  - expect:\n    - a\n   - b\n",
			`6:4: "-" at column 4 lines up with nothing: indent it to column 5 (like "expect:", line 4) or column 3 (like the "- " items, line 3)`},
		// yaml.v3: line 4: could not find expected ':'
		{"item without a dash", "name: x\nsteps:\n  - relay\n  produce\n",
			`4:3: "produce" is not a list item: the items of the list at line 3 start with "- " at column 3`},
		// yaml.v3: line 4: could not find expected ':'
		{"key without a colon", "name: x\nsteps:\n  - relay\nfoo\n",
			`4:1: "foo" is not a key: the keys of the map at line 1 end with ":"`},
		// yaml.v3: line 3: did not find expected key
		{"list item among keys", "name: x\nsteps: [relay]\n- produce\n",
			`3:1: a list item among the keys of the map at line 1: indent it under a key that has no value`},
		// yaml.v3: line 3: mapping values are not allowed in this context
		{"two colons", "name: x\nsteps:\n  - relay: a: b\n",
			`3:13: a second ":" on the line: a value cannot be a "key: value" pair; put the value in quotes if the ":" belongs to it`},
		// yaml.v3: line 2: found character that cannot start any token
		{"at sign", "name: x\nsteps: @x\n",
			`2:8: "@" cannot start a plain value: put the value in quotes`},
		// yaml.v3: line 2: did not find expected key
		{"text after braces", "name: x\nsteps: [relay] x\n",
			`2:16: unexpected text after the closing "]": a comment starts with " #"`},
		// yaml.v3: line 3: found unknown escape character
		{"bad escape", "name: x\nsteps: [relay]\nx: \"a\\qb\"\n",
			`3:6: unknown escape \q in a double-quoted string (write \\ for a backslash, or use single quotes)`},
		// yaml.v3: unknown anchor 'bse' referenced
		{"unknown anchor", "name: x\nx-b: &base {amount: 5}\nsteps:\n  - produce: *bse\n",
			`4:14: alias *bse: no anchor &bse before it (did you mean &base?)`},
		// yaml.v3: control characters are not allowed
		{"control character", "name: x\nsteps: [re\x01lay]\n",
			`2:11: control character U+0001 is not allowed in YAML (in a double-quoted string, write it as an escape)`},
		// yaml.v3: invalid leading UTF-8 octet
		{"not UTF-8", "name: x\nsteps: [r\xffelay]\n",
			`2:10: byte 0xff is not UTF-8: save the file as UTF-8`},
		// yaml.v3: line 3: did not find the expected '>' (not located: yaml.v3's line)
		{"unclosed verbatim tag", "name: x\nsteps: [relay]\nx: !<foo\n",
			`3:1: invalid YAML: did not find the expected '>'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tc.src), &n)
			if err == nil {
				t.Fatalf("yaml.v3 accepts %q", tc.src)
			}
			p := Locate([]byte(tc.src), err)
			if got := itoa(p.Line) + ":" + itoa(p.Col) + ": " + p.Msg; got != tc.want {
				t.Errorf("yaml.v3: %v\n got %s\nwant %s", err, got, tc.want)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestScanAcceptsValidYAML: on every scenario in the repository, and on
// valid YAML that looks wrong (multi-line plain scalars, indentless lists,
// quotes inside words), Scan sees no problem.
func TestScanAcceptsValidYAML(t *testing.T) {
	files, _ := filepath.Glob("../scenarios/*/*.yaml")
	if len(files) == 0 {
		t.Fatal("no scenarios found")
	}
	srcs := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[f] = string(b)
	}
	for i, s := range []string{
		"a: x\n  continued\n",
		"- relay\n  - produce\n",
		"a:\n- 1\n- 2\nb: 3\n",
		"- - a\n  - b\n- c: 1\n  d: 2\n",
		"a: don't\nb: x[1]\nc: 'it''s'\nd: \"q\\\"x\"\n",
		"a: &x\n  b: 1\nc: *x\n",
		"a: |\n  text: with colon\n  and\ta tab\n\n   deeper\n  x\nb: >-\n  folded\n",
		"steps: [\n  relay,\n  {produce: 1}\n]\nname: x\n",
		"a: \"multi\n  line\"\nb: 1\n",
		"a: 1\n\n   # comment\nb: {\n\tc: 1}\n",
		"a:\t1\n",
		"- a: 1\n  b:\n    - c\n  d: 2\n- e\n",
		"---\na: 1\n...\n",
		"a: http://x:80/y # c\n",
	} {
		srcs["inline "+itoa(i)] = s
	}
	for name, src := range srcs {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(src), &n); err != nil {
			t.Errorf("%s: not valid YAML: %v", name, err)
			continue
		}
		if ps := Scan([]byte(src)); len(ps) > 0 {
			t.Errorf("%s: valid YAML, but Scan reports %d:%d: %s", name, ps[0].Line, ps[0].Col, ps[0].Msg)
		}
	}
}

// FuzzLocate: whatever yaml.v3 rejects, Locate names a position inside the
// file and says something, without panicking.
func FuzzLocate(f *testing.F) {
	for _, s := range []string{"a: [\n", "a:\n\t- b\n", "a:\n  b: 1\n c: 2\n", "a: \"x\n", "x: *y\n", "a: b: c\n", "\xff", "- a\n - b\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		var n yaml.Node
		err := yaml.Unmarshal(src, &n)
		if err == nil {
			return
		}
		p := Locate(src, err)
		lines := splitLines(src)
		if p.Line < 1 || p.Line > len(lines) || p.Col < 1 || p.Col > len([]rune(lines[p.Line-1]))+1 || p.Msg == "" {
			t.Fatalf("%v: located at %d:%d %q, outside the file's %d lines", err, p.Line, p.Col, p.Msg, len(lines))
		}
	})
}
