package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/steps"
)

func parseOK(t *testing.T, src string) *Scenario {
	t.Helper()
	scs, errs := Parse("t.yaml", []byte(src), testKinds)
	if len(errs) > 0 || len(scs) != 1 {
		t.Fatalf("unexpected errors:\n%v", errs)
	}
	return scs[0]
}

func TestParseShorthandAndMapFormsAgree(t *testing.T) {
	sc := parseOK(t, `
name: forms
tags: [a, b]
steps:
  - produce(event=bus-7, amount=5, currency=EUR)
  - produce: {event: bus-7, amount: 5, currency: EUR}
  - relay(skip_mark)
  - relay: {skip_mark: true}
  - relay: {skip_mark}
  - claim(idle=250ms, worker=w)
  - "consume(fail=divzero, count=2)"
  - consume:
    name: bare
    expect: {applied: true, acked: 0}
`)
	if sc.Name != "forms" || !cmp.Equal(sc.Tags, []string{"a", "b"}) || len(sc.Steps) != 8 {
		t.Fatalf("got %q %v %d steps", sc.Name, sc.Tags, len(sc.Steps))
	}
	if d := cmp.Diff(sc.Steps[0].Params, sc.Steps[1].Params); d != "" {
		t.Errorf("shorthand and map produce differ:\n%s", d)
	}
	for i := 2; i <= 4; i++ {
		if !sc.Steps[i].Params.(*steps.RelayParams).SkipMark {
			t.Errorf("step %d: skip_mark not set", i)
		}
	}
	claim := sc.Steps[5].Params.(*steps.ClaimParams)
	if claim.Idle != 250*time.Millisecond || claim.Worker != "w" || claim.Consumer != "accounting" {
		t.Errorf("claim params: %+v", claim)
	}
	consume := sc.Steps[6].Params.(*steps.ConsumeParams)
	if consume.Fail != "divzero" || consume.Count != 2 || consume.Worker != "worker-1" {
		t.Errorf("consume params: %+v", consume)
	}
	last := sc.Steps[7]
	if last.Label != "bare" || len(last.Expect.Outcomes) != 2 || !last.Expect.Outcomes[0].IsBool {
		t.Errorf("expect on consume: %+v", last.Expect)
	}
	if got := sc.Steps[6].Pos; got != (diag.Pos{File: "t.yaml", Line: 11, Col: 5}) {
		t.Errorf("position of step 7: %v", got)
	}
}

// A single value works in every form a step's reference shows: the
// shorthand's one bare word is the step's primary parameter (sleep(100ms)),
// and a map value that names a flag is that flag (broker: restart).
func TestSingleValueForms(t *testing.T) {
	sc := parseOK(t, `
name: single values
steps:
  - sleep(100ms)
  - sleep: 100ms
  - sleep: {for: 100ms}
  - broker(restart)
  - broker: restart
  - broker: {restart: true}
  - slot(drop)
  - slot: drop
  - slot: {action: drop}
`)
	for _, group := range [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}} {
		for _, i := range group[1:] {
			if d := cmp.Diff(sc.Steps[group[0]].Params, sc.Steps[i].Params); d != "" {
				t.Errorf("step %d differs from step %d:\n%s", i+1, group[0]+1, d)
			}
		}
	}
	if got := sc.Steps[0].Params.(*steps.SleepParams).For; got != 100*time.Millisecond {
		t.Errorf("sleep(100ms) sleeps %v", got)
	}
	// 0 is a duration (the language's rule), also for sleep: no wait.
	zero := parseOK(t, "name: z\nsteps:\n  - sleep(0)\n  - sleep: {for: 0}\n  - sleep(for=0ms)\n")
	for i, st := range zero.Steps {
		if got := st.Params.(*steps.SleepParams).For; got != 0 {
			t.Errorf("zero step %d sleeps %v", i+1, got)
		}
	}
	if !sc.Steps[4].Params.(*steps.BrokerParams).Restart {
		t.Error("broker: restart does not restart")
	}
	// A step with a primary parameter keeps it for a single value, even one
	// that names a flag: `start: restart` starts the service named restart.
	st := parseOK(t, "name: p\nsteps:\n  - start: restart\n").Steps[0].Params.(*steps.StartParams)
	if st.Service != "restart" || st.Restart {
		t.Errorf("start: restart: %+v, want the service named restart", st.ServiceParams)
	}
}

// producer and consumer, as the language was first described, are the
// PostgreSQL process steps producer_db and consumer_db.
func TestProcessStepAliases(t *testing.T) {
	sc := parseOK(t, "name: a\nsteps:\n  - producer(kill)\n  - consumer: restart\n  - consumer_db: {restart: true}\n")
	if got := []string{sc.Steps[0].Def.Name, sc.Steps[1].Def.Name}; !cmp.Equal(got, []string{"producer_db", "consumer_db"}) {
		t.Errorf("aliases resolve to %v", got)
	}
	if d := cmp.Diff(sc.Steps[1].Params, sc.Steps[2].Params); d != "" {
		t.Errorf("consumer: restart differs from consumer_db: {restart: true}:\n%s", d)
	}
}

// A shorthand call may be the step key, with expect beside it.
func TestShorthandAsTheStepKey(t *testing.T) {
	sc := parseOK(t, "name: k\nsteps:\n  - relay(skip_mark):\n    name: crash\n    expect: {published: 1}\n  - relay: {skip_mark: true}\n    expect: {published: 1}\n")
	if d := cmp.Diff(sc.Steps[0].Params, sc.Steps[1].Params); d != "" || sc.Steps[0].Label != "crash" || len(sc.Steps[0].Expect.Outcomes) != 1 {
		t.Errorf("relay(skip_mark): with expect: label %q, %d outcomes, params differ:\n%s", sc.Steps[0].Label, len(sc.Steps[0].Expect.Outcomes), d)
	}
	_, errs := Parse("t.yaml", []byte("name: k\nsteps:\n  - relay(skip_makr):\n    expect: {published: 0}\n"), testKinds)
	if len(errs) != 1 || errs[0].Error() != `t.yaml:3:11: unknown parameter "skip_makr" (did you mean "skip_mark"?); known: limit, skip_mark, workers, lease, mode, skip_publish, skip_confirm, connection` {
		t.Errorf("a typo inside the key: %v", errs)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // every error, in order
	}{
		{"unknown top key", "name: x\nstpes: [relay]\n", []string{
			`t.yaml:1:1: missing steps`,
			`t.yaml:2:1: unknown key "stpes" (did you mean "steps"?)`,
		}},
		{"unknown step shorthand", "name: x\nsteps:\n  - relya(skip_mark)\n", []string{
			`t.yaml:3:5: unknown step "relya" (did you mean "relay"?)`,
		}},
		{"unknown step map", "name: x\nsteps:\n  - consme: {count: 1}\n", []string{
			`t.yaml:3:5: unknown step "consme" (did you mean "consume"?)`,
		}},
		{"unknown param with suggestion", "name: x\nsteps:\n  - produce: {amout: 5}\n", []string{
			`t.yaml:3:15: unknown parameter "amout" (did you mean "amount"?)`,
		}},
		{"shorthand value column", "name: x\nsteps:\n  - consume(count=2, fail=divzer)\n", []string{
			`t.yaml:3:27: fail: unknown value "divzer" (did you mean "divzero"?)`,
		}},
		{"unknown invariant", "name: x\nexpect_violations: [lots]\nsteps: [produce]\n", []string{
			`t.yaml:2:21: expect_violations: unknown invariant "lots" (did you mean "lost"?)`,
		}},
		{"a list as a variable", "name: x\nvars: {cur: [USD, EUR]}\nsteps:\n  - produce: {currency: \"${cur}\"}\n", []string{
			`t.yaml:2:13: cur: want a single value, got a list; one variant per value is matrix: {cur: [...]}`,
		}},
		{"a matrix value twice", "name: x\nmatrix: {c: [USD, USD]}\nsteps:\n  - produce: {currency: \"${c}\"}\n", []string{
			`t.yaml:2:19: matrix: c: USD given twice (each value makes one variant)`,
		}},
		{"an outcome in a separate expect", "name: x\nsteps:\n  - produce\n  - expect: {committed: 1}\n", []string{
			`t.yaml:4:14: committed is what produce or produce_overlapping reports: put it in that step's own expect (- produce:, then expect: {committed: ...} under it); a separate expect step checks state`,
		}},
		{"a misspelt outcome in a separate expect", "name: x\nsteps:\n  - relay\n  - expect: {publishd: 1}\n", []string{
			`t.yaml:4:14: unknown expect key "publishd" for expect (did you mean "published"?), an outcome: it goes in the step's own expect; known: `,
		}},
		{"a wait without a check", "name: x\nsteps:\n  - relay\n  - expect: {within: 1s}\n", []string{
			`t.yaml:4:5: expect: within and every wait for checks, and there is none; give at least one, e.g. {stream.entries: 1, within: 2s}`,
		}},
		{"wrong type", "name: x\nsteps:\n  - produce: {amount: lots}\n", []string{
			`t.yaml:3:23: amount: want an integer, got "lots"`,
		}},
		{"range", "name: x\nsteps:\n  - produce(amount=0)\n", []string{
			`t.yaml:3:20: amount: must be at least 1, got 0`,
		}},
		{"duration without unit", "name: x\nsteps:\n  - claim(idle=5)\n", []string{
			`t.yaml:3:16: idle: "5" needs a unit (did you mean "5ms" or "5s"?)`,
		}},
		{"duration finer than a millisecond", "name: x\nsteps:\n  - sleep: {for: 100us}\n  - claim(idle=1.5ms)\n", []string{
			`t.yaml:3:18: for: durations have millisecond resolution, got 100us (did you mean "1ms"?)`,
			`t.yaml:4:16: idle: durations have millisecond resolution, got 1.5ms (did you mean "2ms"?)`,
		}},
		{"within finer than a millisecond, every zero", "name: x\nsteps:\n  - expect: {within: 500us, stream.entries: 0}\n  - expect: {within: 1s, every: 0, stream.entries: 0}\n", []string{
			`t.yaml:3:22: within: durations have millisecond resolution, got 500us (did you mean "1ms"?)`,
			`t.yaml:4:33: every: must be at least 1ms, got 0 (leave it out for the default, 10ms)`,
		}},
		{"two bare words", "name: x\nsteps:\n  - sleep(100ms, 2s)\n  - broker: reboot\n", []string{
			`t.yaml:3:18: unknown parameter "2s"; known: for`,
			`t.yaml:4:5: broker needs an action, e.g. broker(trim=0) or broker(kill)`,
			`t.yaml:4:13: broker: want a map of parameters such as {trim: ...}, got "reboot"; or write the shorthand broker(key=value); a single value names a flag: kill, stop, start, restart`,
		}},
		{"a check written as a step", "name: x\nsteps:\n  - sql: {db: consumer, query: \"SELECT 1\", want: 1}\n", []string{
			`t.yaml:3:5: unknown step "sql" (sql is a check: write it in an expect step, expect: {sql: ...}); steps: `,
		}},
		{"sleep without a duration", "name: x\nsteps:\n  - sleep\n", []string{
			`t.yaml:3:5: missing parameter "for": how long`,
		}},
		{"too many relays", "name: x\nsteps:\n  - relay(workers=5)\n", []string{
			`t.yaml:3:19: workers: must be at most 4, got 5`,
		}},
		{"skip_mark on concurrent relays", "name: x\nsteps:\n  - relay(workers=2, skip_mark)\n", []string{
			`t.yaml:3:5: skip_mark is a fault of one relay`,
		}},
		{"unknown lease", "name: x\nsteps:\n  - relay(workers=2, lease=lock)\n", []string{
			`t.yaml:3:28: lease: unknown value "lock"`,
		}},
		{"crash window of another mode", "name: x\nsteps:\n  - relay(skip_publish)\n", []string{
			`t.yaml:3:5: skip_publish is the crash window of mode: mark_first`,
		}},
		{"broker without an action", "name: x\nsteps:\n  - broker\n", []string{
			`t.yaml:3:5: broker needs an action, e.g. broker(trim=0)`,
		}},
		{"same account", "name: x\nsteps:\n  - produce(from=bob)\n", []string{
			`t.yaml:3:5: from and to are both "bob"`,
		}},
		{"unknown check", "name: x\nsteps:\n  - expect: {stream.entry: 1}\n", []string{
			`t.yaml:3:14: unknown expect key "stream.entry" for expect (did you mean "stream.entries"?)`,
		}},
		{"unknown outcome", "name: x\nsteps:\n  - consume:\n    expect: {aplied: 1}\n", []string{
			`t.yaml:4:14: unknown expect key "aplied" for consume (did you mean "applied"?)`,
		}},
		{"a malformed shorthand key", "name: x\nsteps:\n  - relay(skip_mark)::\n", []string{
			`t.yaml:3:10: after "relay" want (key=value, ...), got "(skip_mark):"`,
		}},
		{"misspelt broker override", "name: x\nsteps:\n  - expect: {outbox.rows: 1, rabitmq: {outbox.rows: 1}}\n", []string{
			`t.yaml:3:30: unknown expect key "rabitmq" for expect (did you mean "rabbitmq"?); known: within, every, balances, `,
		}},
		{"outcome of another step", "name: x\nsteps:\n  - relay:\n    expect: {applied: 1}\n", []string{
			`t.yaml:4:14: unknown expect key "applied" for relay`,
		}},
		{"two step keys", "name: x\nsteps:\n  - relay:\n    consume:\n", []string{
			`t.yaml:4:5: a step holds exactly one step key: "relay" and "consume" are two steps`,
		}},
		{"duplicate key", "name: x\nname: y\nsteps: [relay]\n", []string{
			`t.yaml:2:1: key "name" given twice (first at line 1)`,
		}},
		{"bad check value", "name: x\nsteps:\n  - expect: {projection: {accounting: {USD: {amount: 1}}}}\n", []string{
			`t.yaml:3:45: projection: a projection row needs both amount and events`,
		}},
		{"invalid yaml", "name: x\nsteps:\n  - relay\n   bad: [\n", []string{
			`t.yaml:4:4: "bad:" is indented too deep: the list item before it already has a value`,
		}},
		{"not a map", "- relay\n", []string{
			`t.yaml:1:1: a scenario is a map with name and steps, got a list`,
		}},
		{"all problems at once", "name: x\nsteps:\n  - relya\n  - produce(amount=-1)\n  - expect: {outbox.rows: many}\n", []string{
			`t.yaml:3:5: unknown step "relya"`,
			`t.yaml:4:20: amount: must be at least 1, got -1`,
			`t.yaml:5:27: outbox.rows: want an integer, got "many"`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := Parse("t.yaml", []byte(tc.src), testKinds)
			errs.Sort()
			if len(errs) != len(tc.want) {
				t.Fatalf("want %d errors, got %d:\n%v", len(tc.want), len(errs), errs)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tc.want[i]) {
					t.Errorf("error %d:\n got: %s\nwant: %s...", i, e, tc.want[i])
				}
			}
		})
	}
}

func TestLoadFilesDuplicateNames(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a.yaml", "name: same\nsteps: [relay]\n")
	write(t, dir+"/b.yaml", "name: same\nsteps: [relay]\n")
	files, err := ExpandPaths([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	_, errs := LoadFiles(files, testKinds)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `b.yaml:1:7: scenario name "same" is already used at `) {
		t.Fatalf("got %v", errs)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestVarsAndMatrix(t *testing.T) {
	scs, errs := Parse("m.yaml", []byte(`name: per currency
vars: {from: carol}
matrix:
  amount: [5, 70]
  currency: [EUR, JPY]
steps:
  - produce: {amount: "${amount}", currency: "${currency}", from: "${from}"}
  - produce(amount=${amount}, currency=${currency})
  - expect:
      projection:
        accounting:
          ${currency}: {amount: "${amount}", events: 1}
`), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var names []string
	for _, sc := range scs {
		names = append(names, sc.Name)
	}
	want := []string{
		"per currency [amount=5 currency=EUR]", "per currency [amount=5 currency=JPY]",
		"per currency [amount=70 currency=EUR]", "per currency [amount=70 currency=JPY]",
	}
	if !cmp.Equal(names, want) {
		t.Fatalf("variants:\n%s", cmp.Diff(want, names))
	}
	p := scs[3].Steps[0].Params.(*steps.ProduceParams)
	if p.Amount != 70 || p.Currency != "JPY" || p.From != "carol" {
		t.Errorf("substituted params: %+v", p)
	}
	if p2 := scs[3].Steps[1].Params.(*steps.ProduceParams); p2.Amount != 70 || p2.Currency != "JPY" {
		t.Errorf("substituted shorthand: %+v", p2)
	}
	want2 := map[string]map[string]steps.ProjectionRow{"accounting": {"JPY": {Amount: 70, Events: 1}}}
	if got := scs[3].Steps[2].Expect.Checks[0].Want; !cmp.Equal(got, any(want2)) {
		t.Errorf("substituted check: %v", got)
	}
	// A variable's value may use another, a matrix one too.
	uses, errs := Parse("u.yaml", []byte("name: u\nvars: {n: 5, ev: \"pay-${n}-${cur}\", url: \"${producer_db.url}\"}\nmatrix: {cur: [USD]}\nsteps:\n  - produce: {event: \"${ev}\"}\n"), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ev := uses[0].Steps[0].Params.(*steps.ProduceParams).Event; ev != "pay-5-USD" || uses[0].Vars["url"] != "${producer_db.url}" {
		t.Errorf("a value using variables: event %q, vars %v", ev, uses[0].Vars)
	}
	if scs[3].Steps[0].Pos.Line != 7 {
		t.Errorf("position after substitution: %v", scs[3].Steps[0].Pos)
	}
}

func TestVarErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"undefined", "name: x\nvars: {amount: 5}\nmatrix: {currency: [EUR, USD]}\nsteps:\n  - produce: {amount: \"${amout}\"}\n",
			`t.yaml:5:23: undefined variable "amout" (did you mean "amount"?)`},
		{"type after substitution", "name: x\nvars: {amount: lots}\nsteps:\n  - produce: {amount: \"${amount}\"}\n",
			`t.yaml:4:23: amount: want an integer, got "lots"`},
		{"both", "name: x\nvars: {a: 1}\nmatrix: {a: [1]}\nsteps: [produce]\n", `variable "a" is in both vars and matrix`},
		{"empty axis", "name: x\nmatrix: {a: []}\nsteps: [produce]\n", `t.yaml:2:13: matrix: a: want a non-empty list`},
		{"bad name", "name: x\nvars: {a-b: 1}\nsteps: [produce]\n", `t.yaml:2:8: variable name "a-b"`},
		{"itself", "name: x\nvars: {v: \"${v}\"}\nsteps:\n  - produce: {event: \"${v}\"}\n", `t.yaml:2:11: variable "v" uses itself: v → v`},
		{"a cycle", "name: x\nvars: {a: \"${b}\", b: \"x${a}\"}\nsteps: [produce]\n", `t.yaml:2:11: variable "a" uses itself: a → b → a`},
		{"undefined in a value", "name: x\nvars: {ev: \"pay-${nn}\", n: 1}\nsteps: [produce]\n", `t.yaml:2:12: variable "ev" uses undefined variable "nn" (did you mean "n"?)`},
	} {
		_, errs := Parse("t.yaml", []byte(tc.src), testKinds)
		// One mistake in a file with two variants is reported once.
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("%s: got %v, want one error containing %q", tc.name, errs, tc.want)
		}
	}
}

func TestShorthandEdges(t *testing.T) {
	sc := parseOK(t, `name: edges
steps:
  - relay()
  - relay (limit=2)
  - produce(event="a,b(c)", currency='EUR')
  - |
    consume(count=1)
`)
	if sc.Steps[0].Def.Name != "relay" || sc.Steps[1].Params.(*steps.RelayParams).Limit != 2 {
		t.Errorf("relay forms: %v %v", sc.Steps[0], sc.Steps[1])
	}
	if p := sc.Steps[2].Params.(*steps.ProduceParams); p.Event != "a,b(c)" || p.Currency != "EUR" {
		t.Errorf("quoted values: %+v", p)
	}
	if p := sc.Steps[3].Params.(*steps.ConsumeParams); p.Count != 1 {
		t.Errorf("block scalar: %+v", p)
	}
	_, errs := Parse("t.yaml", []byte("name: x\nsteps:\n  - produce(event=\"open)\n"), testKinds)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `t.yaml:3:13: unterminated " quote`) {
		t.Errorf("unterminated quote: %v", errs)
	}
}

func TestEveryProblemOfAStepMapAtOnce(t *testing.T) {
	_, errs := Parse("t.yaml", []byte(`name: x
steps:
  - consume: {count: 0, fial: divzero}
    expct: {applied: 1}
  - relay: {limit: 0}
    name: [not, text]
    expect: {publishd: 1}
`), testKinds)
	errs.Sort()
	want := []string{
		`t.yaml:3:22: count: must be at least 1`,
		`t.yaml:3:25: unknown parameter "fial" (did you mean "fail"?)`,
		`t.yaml:4:5: unknown key "expct" beside step "consume" (did you mean "expect"?)`,
		`t.yaml:5:20: limit: must be at least 1`,
		`t.yaml:6:11: name: want text`,
		`t.yaml:7:14: unknown expect key "publishd" for relay (did you mean "published"?)`,
	}
	if len(errs) != len(want) {
		t.Fatalf("want %d errors, got:\n%v", len(want), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d: got %s\nwant %s", i, errs[i], w)
		}
	}
}

func TestAliasesAndMergeKeys(t *testing.T) {
	sc := parseOK(t, `name: aliases
x-base: &base {amount: 5, currency: EUR}
steps:
  - produce: &p {amount: 7}
  - produce: *p
  - produce: {<<: *base, currency: JPY}
`)
	if p := sc.Steps[1].Params.(*steps.ProduceParams); p.Amount != 7 {
		t.Errorf("alias: %+v", p)
	}
	if p := sc.Steps[2].Params.(*steps.ProduceParams); p.Amount != 5 || p.Currency != "JPY" {
		t.Errorf("merge: %+v (keys written beside <<: must win)", p)
	}
	if _, errs := Parse("t.yaml", []byte("name: x\nsteps: &s [*s]\n"), testKinds); len(errs) != 1 || !strings.Contains(errs[0].Error(), "alias that contains itself") {
		t.Errorf("alias cycle: %v", errs)
	}
}

func TestSameFileTwiceRunsOnce(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a.yaml", "name: a\nsteps: [relay]\n")
	write(t, dir+"/b.yaml", "steps: [relay]\n")
	write(t, dir+"/c.yaml", "steps: [relay]\n")
	link := t.TempDir() + "/link"
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir+"/a.yaml") // a relative spelling of the same file
	if err != nil {
		t.Fatal(err)
	}
	files, _ := ExpandPaths([]string{dir, dir + "/a.yaml", dir + "/./a.yaml", rel, link, link + "/a.yaml"})
	scs, errs := LoadFiles(files, testKinds)
	if len(files) != 3 || len(scs) != 1 || len(errs) != 2 {
		t.Fatalf("files %v; %d scenarios; errors (want only the two missing names):\n%v", files, len(scs), errs)
	}
}

// TestOnlyRegularFiles: a FIFO named explicitly is an error at once (reading
// it would block forever); one in a directory walk is skipped; LoadFiles
// refuses one too.
func TestOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a.yaml", "name: a\nsteps: [relay]\n")
	fifo := dir + "/pipe.yaml"
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no mkfifo:", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := ExpandPaths([]string{fifo}); err == nil || err.Error() != fifo+" is not a regular file (a FIFO)" {
			t.Errorf("explicit FIFO: err %v", err)
		}
		files, err := ExpandPaths([]string{dir})
		if err != nil || len(files) != 1 || files[0] != dir+"/a.yaml" {
			t.Errorf("walk: files %v, err %v; want only a.yaml", files, err)
		}
		if _, errs := LoadFiles([]string{fifo}, testKinds); len(errs) != 1 || errs[0].Error() != fifo+" is not a regular file (a FIFO)" {
			t.Errorf("LoadFiles on a FIFO: %v", errs)
		}
		if _, err := ExpandPaths([]string{"/dev/null"}); err == nil || err.Error() != "/dev/null is not a regular file (a character device)" {
			t.Errorf("/dev/null: err %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("loading a FIFO still blocks")
	}
}
