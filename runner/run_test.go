package runner

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/kafka"
	"github.com/outboxdrill/runner/internal/progress"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

func TestMain(m *testing.M) {
	// The library's subtests and most other tests wait on servers, not on
	// the CPU: without an explicit -parallel, run 8 at once even where
	// GOMAXPROCS is smaller.
	testservers.Parallel(8)
	testservers.Main(m)
}

func testParams(t testing.TB) Params {
	return Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 4}
}

// runAll runs scenarios on the test servers and returns results by name.
func runAll(t *testing.T, p Params, scs []*scenario.Scenario) (*report.Report, map[string]*report.Result) {
	t.Helper()
	rep, err := Run(context.Background(), p, scs)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	byName := map[string]*report.Result{}
	for _, r := range rep.Results {
		byName[r.Scenario.Name] = r
	}
	if len(byName) != len(scs) {
		t.Fatalf("ran %d of %d scenarios", len(byName), len(scs))
	}
	return rep, byName
}

// step is one step of the every-key scenario: its YAML head and its
// expectations (key → value as YAML), all correct.

// wrongValue is a deliberately wrong expectation for each state check, and
// the text its failure must contain.
var wrongValue = map[string][2]string{
	"stream.entries":                   {"4", "want 4, got 3"},
	"stream.events":                    {"2", "want 2, got 1"},
	"stream.pending":                   {"{accounting: 1, audit: 3}", "- accounting: 1"},
	"stream.lag":                       {"{accounting: 2, audit: 3}", "- accounting: 2"},
	"outbox.rows":                      {"2", "want 2, got 1"},
	"outbox.unpublished":               {"1", "want 1, got 0"},
	"journal.rows":                     {"2", "want 2, got 1"},
	"ledger.rows":                      {"4", "want 4, got 2"},
	"inbox.rows":                       {"{accounting: 1}", "+ audit: 1"},
	"projection":                       {"{accounting: {USD: {amount: 200, events: 1}}, audit: {USD: {amount: 100, events: 1}}}", "- accounting.USD.amount: 200\n+ accounting.USD.amount: 100"},
	"balances":                         {"{alice: {USD: -100}, bob: {USD: 100, EUR: 5}}", "- bob.EUR: 5"},
	"dlq.entries":                      {"3", "want 3, got 2"},
	"ordering.gaps":                    {"1", "want 1, got 0"},
	"metrics.unpublished":              {`"> 0"`, "want > 0, got 0"},
	"metrics.outbox_oldest_age":        {`"> 1h"`, "want > 1h0m0s, got 0s"},
	"metrics.pel_oldest_idle":          {`"> 1h"`, "want > 1h0m0s, got "},
	"metrics.redeliveries":             {"1", "want 1, got 0"},
	"metrics.projection_lag":           {"1", "want 1, got 0"},
	"metrics.projection_watermark_age": {`"> 1h"`, "want > 1h0m0s, got 0s"},
	"metrics.inbox_conflicts":          {"2", "want 2, got 1"},
	"metrics.dlq":                      {`">= 1"`, "want >= 1, got 0"},
	"sql":                              {`{db: producer, query: "SELECT count(*) FROM outbox", want: 2}`, "want 2, got 1"},
}

// TestEveryKeyCanFail runs the every-key scenario once as written (it must
// pass: the values are right) and once per key with that key's value wrong
// (it must fail, at that key, with a want/got diff).
func TestEveryKeyCanFail(t *testing.T) {
	t.Parallel()
	type variant struct{ key, wantMsg string }
	variants := map[string]variant{}
	var scs []*scenario.Scenario
	add := func(name, src string, v variant) {
		sc, errs := scenario.Parse(name+".yaml", []byte(src), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatalf("%s:\n%v\n%s", name, errs, src)
		}
		scs = append(scs, sc...)
		variants[name] = v
	}
	add("correct", testutil.RenderEveryKey("correct", func(_, _ int, v string) string { return v }), variant{})

	covered := map[string]bool{}
	for si, s := range testutil.EveryKey {
		stepName := strings.Fields(strings.TrimSuffix(strings.Fields(s.Head)[0], ":"))[0]
		for ki, kv := range s.Expect {
			name := fmt.Sprintf("step %d %s wrong", si+1, kv[0])
			var wrong, msg string
			if stepName == "expect" {
				wrong, msg = wrongValue[kv[0]][0], wrongValue[kv[0]][1]
				covered["check "+kv[0]] = true
			} else {
				var n int
				fmt.Sscan(kv[1], &n)
				wrong, msg = fmt.Sprint(n+1), fmt.Sprintf("want %d, got %d", n+1, n)
				covered[stepName+" "+kv[0]] = true
			}
			src := testutil.RenderEveryKey(name, func(s2, k2 int, v string) string {
				if s2 == si && k2 == ki {
					return wrong
				}
				return v
			})
			add(name, src, variant{key: kv[0], wantMsg: msg})
		}
	}
	// Every key the registries offer must be covered, so a new key needs a case here.
	for _, d := range steps.Defs() {
		for _, k := range d.Outcomes {
			if !covered[d.Name+" "+k.Name] && !slices.Contains(cdcKeys, d.Name+" "+k.Name) && !slices.Contains(teamOnlyKeys, d.Name+" "+k.Name) {
				t.Errorf("outcome %s.%s has no wrong-value case in everyKey", d.Name, k.Name)
			}
		}
	}
	for _, c := range steps.CheckNames() {
		if !covered["check "+c] && !slices.Contains(kafkaOnlyChecks, c) && !slices.Contains(cdcKeys, "check "+c) {
			t.Errorf("state check %s has no wrong-value case in everyKey", c)
		}
	}

	_, results := runAll(t, testParams(t), scs)
	for name, v := range variants {
		r := results[name]
		if v.key == "" {
			if !r.Passed() {
				t.Fatalf("the correct every-key scenario failed:\n%s", report.FormatResult(r, true))
			}
			if len(r.Alerts) != 3 || !strings.Contains(r.Alerts[0], "identity conflict: event bus-1 is in the inbox of audit") ||
				!regexp.MustCompile(`reported correct\.yaml:\d+:5: identity conflict`).MatchString(string(report.FormatResult(r, false))) {
				t.Errorf("the identity conflict was not reported: %q", r.Alerts)
			}
			continue
		}
		if r.Passed() {
			t.Errorf("%s: passed, but %s was wrong", name, v.key)
			continue
		}
		f := r.Failures[0]
		if len(r.Failures) != 1 || f.Key != v.key || !strings.Contains(f.Msg, v.wantMsg) {
			t.Errorf("%s: want one failure at %s containing %q, got:\n%s", name, v.key, v.wantMsg, report.FormatResult(r, false))
		}
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `\.yaml:\d+:\d+$`).MatchString(f.Pos.String()) {
			t.Errorf("%s: failure position %q is not file:line:col", name, f.Pos)
		}
	}
}

func TestStepErrors(t *testing.T) {
	t.Parallel()
	src := func(name, tail string) *scenario.Scenario {
		scs, errs := scenario.Parse(name+".yaml", []byte("name: "+name+"\nsteps:\n  - produce(event=bus-1)\n"+tail), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return scs[0]
	}
	_, res := runAll(t, testParams(t), []*scenario.Scenario{
		src("unexpected", "  - produce: {event: bus-1}\n"),
		src("expected", "  - produce: {event: bus-1}\n    expect: {error: already produced}\n"),
		src("wrong text", "  - produce: {event: bus-1}\n    expect: {error: no such text}\n"),
		src("no error", "  - relay:\n    expect: {error: boom}\n"),
	})
	check := func(name, want string) {
		t.Helper()
		r := res[name]
		if want == "" {
			if !r.Passed() {
				t.Errorf("%s: %v", name, r.Failures)
			}
			return
		}
		if r.Passed() || r.Failures[0].Key != "error" || !strings.Contains(r.Failures[0].String(), want) {
			t.Errorf("%s: want an error failure containing %q, got %v", name, want, r.Failures)
		}
	}
	check("unexpected", "unexpected.yaml:4:5: error: step failed: event bus-1 was already produced")
	check("expected", "")
	check("wrong text", `want an error containing "no such text", got: event bus-1 was already produced`)
	check("no error", `want the step to fail with an error containing "boom"; it succeeded`)
}

func TestTimeoutCancelsHungStep(t *testing.T) {
	t.Parallel()
	scs, errs := scenario.Parse("hang.yaml", []byte("name: hang\nsteps:\n  - consume(block=1m)\n"), scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sc := scs[0]
	p := testParams(t)
	p.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, res := runAll(t, p, []*scenario.Scenario{sc})
	r := res["hang"]
	if r.Passed() || !strings.Contains(r.Failures[0].String(), "hang.yaml:3:5: error: step cancelled: scenario timed out after 300ms") {
		t.Fatalf("got %v", r.Failures)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the hung step was not cancelled: the run took %s", d)
	}
}

func TestRunDropsOnlyWhatItCreated(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	opt, _ := redis.ParseURL(testservers.Redis(t))
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	// Someone else's objects under our prefix: the run must leave them alone.
	if _, err := conn.Exec(ctx, `CREATE DATABASE drill_bystander_1_p`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `DROP DATABASE IF EXISTS drill_bystander_1_p`)
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "drill:bystander:1", Values: []any{"k", "v"}})
	defer rdb.Del(ctx, "drill:bystander:1")

	sc := scenariotest.ParseOne(t, "name: leaves nothing\nsteps:\n  - produce\n  - relay\n  - consume(skip_ack)\n")
	rep, _ := runAll(t, testParams(t), []*scenario.Scenario{sc})

	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE $1`, "drill_"+rep.RunID+"%").Scan(&n); err != nil || n != 0 {
		t.Errorf("databases of run %s left behind: %d (%v)", rep.RunID, n, err)
	}
	if keys, _ := rdb.Keys(ctx, "drill:"+rep.RunID+":*").Result(); len(keys) != 0 {
		t.Errorf("stream keys left behind: %v", keys)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = 'drill_bystander_1_p'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the run dropped a database it did not create")
	}
	if rdb.Exists(ctx, "drill:bystander:1").Val() != 1 {
		t.Errorf("the run deleted a stream it did not create")
	}
}

func TestParallelRunKeepsBlocksWholeAndOrderStable(t *testing.T) {
	var scs []*scenario.Scenario
	for i := range 6 {
		scs = append(scs, scenariotest.ParseOne(t, fmt.Sprintf("name: p%d\nsteps:\n  - produce: {amount: %d}\n  - relay\n  - consume\n  - expect: {projection: {accounting: {USD: {amount: %d, events: 1}}}}\n", i, i+1, i+1)))
	}
	var out testutil.SyncBuffer
	p := testParams(t)
	p.Parallel, p.Verbose, p.Out = 4, true, &out
	rep, _ := runAll(t, p, scs)
	for i, r := range rep.Results {
		if r.Scenario != scs[i] || !r.Passed() {
			t.Fatalf("result %d: %s passed=%v, want p%d in input order, passing", i, r.Scenario.Name, r.Passed(), i)
		}
		// Each block is printed whole: it appears verbatim in the output.
		if !strings.Contains(out.String(), string(report.FormatResult(r, true))) {
			t.Errorf("block of %s is not contiguous in:\n%s", r.Scenario.Name, out.String())
		}
	}
}

func TestFailFastStartsNothingAfterAFailure(t *testing.T) {
	scs := []*scenario.Scenario{
		scenariotest.ParseOne(t, "name: fails\nsteps:\n  - expect: {outbox.rows: 1}\n"),
		scenariotest.ParseOne(t, "name: second\nsteps: [produce]\n"),
		scenariotest.ParseOne(t, "name: third\nsteps: [produce]\n"),
	}
	p := testParams(t)
	p.Parallel, p.FailFast = 1, true
	rep, err := Run(context.Background(), p, scs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || len(rep.NotRun) != 2 || !strings.Contains(rep.Summary(), "0 passed, 1 failed, 2 not run") {
		t.Fatalf("got %d results, %d not run: %s", len(rep.Results), len(rep.NotRun), rep.Summary())
	}
}

func TestSetupFailureIsAnErrorNotAPanic(t *testing.T) {
	sc := scenariotest.ParseOne(t, "name: s\nsteps: [produce]\n")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		p    Params
		path string
		want string
	}{
		{"bad redis url", Params{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: "notaurl"}}, "", "--redis notaurl"},
		{"no postgres", Params{PGURL: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", URLs: map[string]string{broker.Redis: testservers.Redis(t)}}, "", "PostgreSQL postgres://postgres@127.0.0.1:1/postgres"},
		{"no redis-server binary", Params{PGURL: testservers.PG(t)}, t.TempDir(), `install the Debian package "redis-server"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.path != "" {
				t.Setenv("PATH", tc.path)
			}
			rep, err := Run(ctx, tc.p, []*scenario.Scenario{sc})
			if err == nil || rep != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error containing %q", rep, err, tc.want)
			}
		})
	}
}

func TestProgressLineIsErasedBeforeEachBlock(t *testing.T) {
	scs := []*scenario.Scenario{scenariotest.ParseOne(t, "name: one\nsteps: [produce]\n"), scenariotest.ParseOne(t, "name: two\nsteps: [produce]\n")}
	var out testutil.SyncBuffer
	p := testParams(t)
	// The progress on the same screen as the blocks (stderr and stdout a
	// terminal): erased before each block, drawn again below it.
	p.Parallel, p.Out, p.Progress = 1, &out, progress.New(&out, progress.Config{Noun: "scenarios", Bad: "failed", Live: true})
	runAll(t, p, scs)
	p.Progress.Close()
	s := out.String()
	if !strings.Contains(s, "1/2 scenarios, 0 failed, ") || !strings.Contains(s, "\r\x1b[K--- PASS: two") || !strings.HasSuffix(s, "\r\x1b[K") {
		t.Fatalf("progress line not drawn and erased around blocks: %q", s)
	}
	// Without Progress (pipes, CI): plain lines only.
	out = testutil.SyncBuffer{}
	p.Progress = nil
	runAll(t, p, scs)
	if strings.ContainsAny(out.String(), "\r\x1b") {
		t.Fatalf("control characters without a terminal: %q", out.String())
	}
}

// TestReusedDatabasesStartEmpty runs a scenario that leaves rows, a stream,
// a group and pending entries, then one on the same (reset) database pair
// that must see none of it.
func TestReusedDatabasesStartEmpty(t *testing.T) {
	dirty := scenariotest.ParseOne(t, "name: dirty\nsteps:\n  - produce\n  - produce(currency=EUR)\n  - relay(skip_mark)\n  - consume(skip_ack)\n  - consume(consumer=audit, fail=divzero)\n")
	clean := scenariotest.ParseOne(t, `name: clean
steps:
  - expect:
      outbox.rows: 0
      journal.rows: 0
      ledger.rows: 0
      balances: {}
      inbox.rows: 0
      projection: {}
      stream.entries: 0
      stream.pending: 0
  - produce
  - relay
  - consume
  - expect: {stream.pending: {accounting: 0}, projection: {accounting: {USD: {amount: 100, events: 1}}}}
`)
	p := testParams(t)
	p.Parallel = 1
	rep, _ := runAll(t, p, []*scenario.Scenario{dirty, clean})
	a, b := rep.Results[0], rep.Results[1]
	if !a.Passed() || !b.Passed() {
		t.Fatalf("%v\n%s", a.Failures, report.FormatResult(b, true))
	}
	if a.Where[0] != b.Where[0] || a.Where[1] != b.Where[1] || a.Where[2] == b.Where[2] {
		t.Errorf("want the same databases and a new stream: %v then %v", a.Where, b.Where)
	}
}

func TestTimeoutWhileWaitingWithin(t *testing.T) {
	t.Parallel()
	sc := scenariotest.ParseOne(t, "name: waits\nsteps:\n  - produce\n  - expect: {within: 1m, stream.entries: 1}\n")
	p := testParams(t)
	p.Timeout = 300 * time.Millisecond
	_, res := runAll(t, p, []*scenario.Scenario{sc})
	if f := res["waits"].Failures; len(f) != 1 || f[0].String() != "t.yaml:4:5: error: step cancelled: scenario timed out after 300ms" {
		t.Fatalf("got %v", f)
	}
}
func processFaultScenarios(t *testing.T) []*scenario.Scenario {
	t.Helper()
	files, _ := filepath.Glob("../scenarios/production/*.yaml")
	all, errs := scenario.LoadFiles(files, scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var scs []*scenario.Scenario
	for _, sc := range all {
		if sc.Exclusive || sc.BrokerExclusive {
			scs = append(scs, sc)
		}
	}
	// Two on the broker, one on each side's PostgreSQL.
	if len(scs) < 4 {
		t.Fatalf("%d process-fault scenarios, want at least 4", len(scs))
	}
	return scs
}

// TestProcessFaultsRunOnManagedServers runs the broker process faults on
// servers the runner starts itself, alongside ordinary scenarios at
// --parallel 4: they pass, and the others are not disturbed.
func TestProcessFaultsRunOnManagedServers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts its own servers")
	}
	scs := processFaultScenarios(t)
	for i := range 4 {
		scs = append(scs, scenariotest.ParseOne(t, fmt.Sprintf("name: bystander %d\nsteps:\n  - produce\n  - relay\n  - consume\n  - expect: {projection: {accounting: {USD: {amount: 100, events: 1}}}}\n", i)))
	}
	// The relay while the broker is down, as the language first described
	// it: it fails cleanly, an outcome (published 0, marked 0) and no
	// error the scenario must expect; and its wrong twin fails.
	down := "steps:\n  - broker(stop)\n  - produce\n  - relay:\n    expect: {published: %d, marked: 0}\n  - expect: {outbox.unpublished: 1}\n  - broker(start)\n  - relay\n  - expect: {stream.entries: 1, outbox.unpublished: 0}\n"
	scs = append(scs, scenariotest.ParseOne(t, "name: relay while the broker is down\n"+fmt.Sprintf(down, 0)),
		scenariotest.ParseOne(t, "name: relay while the broker is down, wrong\n"+fmt.Sprintf(down, 1)))
	rep, err := Run(t.Context(), Params{Parallel: 4, PGURL: os.Getenv("RUNNER_PG_URL")}, scs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		out := string(report.FormatResult(r, true))
		if strings.HasSuffix(r.Scenario.Name, ", wrong") {
			if r.Passed() || !strings.Contains(out, "published:") || !strings.Contains(out, "want 1, got 0") {
				t.Errorf("%s: want a failure naming published:\n%s", r.Scenario.Name, out)
			}
			continue
		}
		if !r.Passed() || r.Skipped != "" {
			t.Errorf("%s: skipped %q\n%s", r.Scenario.Name, r.Skipped, out)
		}
		if r.Scenario.Name == "relay while the broker is down" && !strings.Contains(out, "failed cleanly (the broker is down: the rows stay unpublished): publish to the broker: ") {
			t.Errorf("the relay's trace does not say it failed cleanly:\n%s", out)
		}
	}
}

// TestProcessFaultsSkipOnExternalServers: with --redis the runner cannot
// kill the broker, so those scenarios are skipped with the reason — never
// passed.
func TestProcessFaultsSkipOnExternalServers(t *testing.T) {
	rep, _ := runAll(t, testParams(t), processFaultScenarios(t))
	for _, r := range rep.Results {
		if r.Skipped == "" || !strings.Contains(r.Skipped, "needs the runner's own") {
			t.Errorf("%s: want skipped with the reason, got %q (failures %v)", r.Scenario.Name, r.Skipped, r.Failures)
		}
	}
	if rep.Skipped() != len(rep.Results) || !strings.Contains(rep.Summary(), fmt.Sprintf("0 passed, 0 failed, %d skipped", len(rep.Results))) {
		t.Errorf("summary %q", rep.Summary())
	}
}

// TestDeclaredViolationMustOccur: expect_violations is an expectation like
// any other: a correct pipeline that declares a violation fails, naming it.
func TestDeclaredViolationMustOccur(t *testing.T) {
	t.Parallel()
	sc := scenariotest.ParseOne(t, "name: clean but declares loss\nexpect_violations: [lost]\nsteps: [produce, relay, consume]\n")
	_, byName := runAll(t, testParams(t), []*scenario.Scenario{sc})
	r := byName[sc.Name]
	if r.Passed() || len(r.Failures) != 1 || r.Failures[0].Key != "expect_violations" ||
		!strings.Contains(r.Failures[0].Msg, "declared lost, but the history shows none") {
		t.Fatalf("want one expect_violations failure naming lost, got %v", r.Failures)
	}
	if got := r.Failures[0].Pos.String(); got != "t.yaml:2:20" {
		t.Errorf("failure at %s, want the declaration t.yaml:2:20", got)
	}
}

// kafkaOnlyChecks are n/a on Redis, where the every-key scenario runs:
// TestBrokerTxnCheckCanFail makes them fail on Kafka.
var kafkaOnlyChecks = []string{"stream.outputs"}

// TestBrokerTxnCheckCanFail runs the broker-transaction drill on Kafka as
// written, and with stream.outputs wrong after the aborted transaction and
// after the committed one: each must fail there with a want/got diff.
func TestBrokerTxnCheckCanFail(t *testing.T) {
	t.Parallel()
	src := func(name, afterAbort, afterCommit string) *scenario.Scenario {
		y := "name: " + name + `
steps:
  - produce: {event: bus-1, amount: 100}
  - relay
  - consume: {broker_txn: true, skip_ack: true}
    expect: {applied: 1, acked: 0}
  - expect: {stream.outputs: ` + afterAbort + `}
  - consume: {broker_txn: true}
    expect: {duplicate: 1, acked: 1}
  - expect: {stream.outputs: ` + afterCommit + `}
`
		scs, errs := scenario.Parse(name+".yaml", []byte(y), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return scs[0]
	}
	p := testParams(t)
	p.Brokers, p.URLs[broker.Kafka] = []string{broker.Kafka}, testservers.URL(t, broker.Kafka)
	_, res := runAll(t, p, []*scenario.Scenario{
		src("right", "0", "1"), src("aborted output counted", "1", "1"), src("committed output missed", "0", "0"),
	})
	if r := res["right"]; !r.Passed() {
		t.Fatalf("the right one failed:\n%s", report.FormatResult(r, true))
	} else if r.Label != kafka.KfakeLabel || !strings.Contains(r.Name(), "[kafka (kfake)]") {
		t.Errorf("result on the runner's own Kafka named %q (label %q): every report must say kfake", r.Name(), r.Label)
	}
	for name, msg := range map[string]string{"aborted output counted": "want 1, got 0", "committed output missed": "want 0, got 1"} {
		r := res[name]
		if r.Passed() || r.Failures[0].Key != "stream.outputs" || !strings.Contains(r.Failures[0].Msg, msg) {
			t.Errorf("%s: want a stream.outputs failure %q, got:\n%s", name, msg, report.FormatResult(r, false))
		}
	}
}

// cdcKeys need the CDC relay's slot, whose "unpublished" differs from the
// polling relay's: TestCDCKeysCanFail makes each fail.
// teamOnlyKeys are outcomes of steps that run a team's system file:
// cmd/runner's TestProduceOverlappingOutcomesCanFail makes each fail.
var teamOnlyKeys = []string{"produce_overlapping committed", "produce_overlapping published_between"}

var cdcKeys = []string{"relay confirmed", "check metrics.cdc_lag_bytes", "check metrics.cdc_lag_events", "check metrics.cdc_retained_wal", "check metrics.cdc_slot_active"}

// TestCDCKeysCanFail runs a CDC scenario as written and once per key with
// that key's value wrong: each must fail there with a want/got diff.
func TestCDCKeysCanFail(t *testing.T) {
	t.Parallel()
	right := map[string]string{"before": "{metrics.cdc_lag_events: 2, metrics.cdc_slot_active: 0, metrics.cdc_lag_bytes: \"> 0\", metrics.cdc_retained_wal: \"> 0\"}",
		"relay": "{published: 2, confirmed: 2}", "after": "{metrics.cdc_lag_events: 0}"}
	wrong := []struct{ name, at, value, key, msg string }{
		{"lag events", "before", "{metrics.cdc_lag_events: 3}", "metrics.cdc_lag_events", "want 3, got 2"},
		{"slot active", "before", "{metrics.cdc_slot_active: 1}", "metrics.cdc_slot_active", "want 1, got 0"},
		{"lag bytes", "before", "{metrics.cdc_lag_bytes: \"> 1000000000\"}", "metrics.cdc_lag_bytes", "want > 1000000000, got"},
		{"retained wal", "before", "{metrics.cdc_retained_wal: \"== 0\"}", "metrics.cdc_retained_wal", "want 0, got"},
		{"confirmed", "relay", "{published: 2, confirmed: 1}", "confirmed", "want 1, got 2"},
		{"lag after", "after", "{metrics.cdc_lag_events: 1}", "metrics.cdc_lag_events", "want 1, got 0"},
	}
	src := func(name string, vals map[string]string) *scenario.Scenario {
		y := "name: " + name + `
steps:
  - produce
  - produce
  - expect: ` + vals["before"] + `
  - relay: {mode: cdc}
    expect: ` + vals["relay"] + `
  - expect: ` + vals["after"] + `
`
		scs, errs := scenario.Parse(name+".yaml", []byte(y), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatal(name, errs)
		}
		return scs[0]
	}
	scs := []*scenario.Scenario{src("right", right)}
	for _, w := range wrong {
		vals := maps.Clone(right)
		vals[w.at] = w.value
		scs = append(scs, src(w.name, vals))
	}
	_, res := runAll(t, testParams(t), scs)
	if r := res["right"]; !r.Passed() {
		t.Fatalf("the right one failed:\n%s", report.FormatResult(r, true))
	}
	for _, w := range wrong {
		r := res[w.name]
		if r.Passed() || r.Failures[0].Key != w.key || !strings.Contains(r.Failures[0].Msg, w.msg) {
			t.Errorf("%s: want a %s failure %q, got:\n%s", w.name, w.key, w.msg, report.FormatResult(r, false))
		}
	}
}
