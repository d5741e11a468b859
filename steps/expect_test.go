package steps

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/pipeline"
)

// counter is a state check whose value grows by one on every read.
func counter() *Check {
	n := int64(0)
	return &Check{Name: "counter", Value: kindCount,
		observe: func(context.Context, *Env, any) (any, error) { n++; return n, nil }}
}

// argsOf turns a YAML map into expect args.
func argsOf(t *testing.T, src string) []Arg {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	var args []Arg
	m := n.Content[0]
	for i := 0; i < len(m.Content); i += 2 {
		args = append(args, Arg{Key: m.Content[i].Value, Value: m.Content[i+1]})
	}
	return args
}

func compileWithin(t *testing.T, src string) Expect {
	t.Helper()
	e, errs := CompileExpect(registry()[expectStep], "t.yaml", argsOf(t, src), testBrokers)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return e
}

func TestWithinPollsUntilTheChecksHold(t *testing.T) {
	e := compileWithin(t, "{within: 2s, every: 5ms}")
	e.Checks = []CheckWant{{Check: counter(), Want: int64(3)}}
	fails, obs, attempts := e.poll(context.Background(), nil)
	if len(fails) != 0 || attempts != 3 || obs[0].Got != int64(3) || !obs[0].OK {
		t.Fatalf("fails %v, observed %v after %d attempts", fails, obs, attempts)
	}
}

func TestWithinFailsWithLastValueAndAttempts(t *testing.T) {
	e := compileWithin(t, "{within: 60ms, every: 10ms}")
	e.Checks = []CheckWant{{Check: counter(), Want: int64(1000)}}
	start := time.Now()
	fails, _, _ := e.poll(context.Background(), nil)
	if len(fails) != 1 {
		t.Fatalf("fails %v", fails)
	}
	msg := fails[0].Msg
	if !strings.Contains(msg, "want 1000, got ") || !strings.Contains(msg, "attempts within 60ms, every 10ms)") {
		t.Errorf("message %q lacks the last value or the attempts", msg)
	}
	if time.Since(start) < 60*time.Millisecond {
		t.Errorf("gave up after %s, before within", time.Since(start))
	}
}

// failing is a state check that fails with err on every read, counting them.
func failing(err error, reads *int) *Check {
	return &Check{Name: "failing", Value: kindCount,
		observe: func(context.Context, *Env, any) (any, error) { *reads++; return nil, err }}
}

// A query PostgreSQL rejects as written (class 42) fails at once: retrying
// it until within passes would only hide the mistake behind a timeout. A
// transient error (a serialization failure) is still retried.
func TestWithinStopsOnAPermanentSQLError(t *testing.T) {
	e := compileWithin(t, "{within: 15s, every: 5ms}")
	var reads int
	undefined := fmt.Errorf("observe: %w", &pgconn.PgError{Severity: "ERROR", Code: "42703", Message: `column "nope" does not exist`})
	e.Checks = []CheckWant{{Check: failing(undefined, &reads), Want: int64(1)}}
	start := time.Now()
	fails, _, attempts := e.poll(context.Background(), nil)
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %s: a permanent error was retried", took)
	}
	if len(fails) != 1 || attempts != 1 || reads != 1 {
		t.Fatalf("fails %v after %d attempts, %d reads; want one failure after one read", fails, attempts, reads)
	}
	if msg := fails[0].Msg; !strings.Contains(msg, `column "nope" does not exist (SQLSTATE 42703)`) || !strings.Contains(msg, "SQLSTATE 42703 is permanent: not retried; attempt 1 of within 15s") {
		t.Errorf("message %q: want the error and that it was not retried", msg)
	}
	reads = 0
	e = compileWithin(t, "{within: 50ms, every: 5ms}")
	e.Checks = []CheckWant{{Check: failing(&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, &reads), Want: int64(1)}}
	if _, _, attempts := e.poll(context.Background(), nil); attempts < 2 {
		t.Errorf("a transient error (40001) was read %d time(s): want it retried until within", attempts)
	}
}

func TestWithoutWithinChecksOnce(t *testing.T) {
	e := compileWithin(t, "{stream.entries: 1}")
	e.Checks = []CheckWant{{Check: counter(), Want: int64(2)}}
	if fails, _, _ := e.poll(context.Background(), nil); len(fails) != 1 || !strings.Contains(fails[0].Msg, "want 2, got 1") {
		t.Fatalf("fails %v", fails)
	}
}

func TestWithinErrors(t *testing.T) {
	for src, want := range map[string]string{
		"{every: 5ms, stream.entries: 1}": "every: polls only together with within",
		"{within: soon}":                  `within: want a duration such as 0, 250ms or 2s, got "soon"`,
	} {
		_, errs := CompileExpect(registry()[expectStep], "t.yaml", argsOf(t, src), testBrokers)
		if len(errs) == 0 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%s: got %v, want %q", src, errs, want)
		}
	}
}

func TestDiffShowsValuesAsYAML(t *testing.T) {
	want := map[string]map[string]ProjectionRow{"accounting": {"USD": {Amount: 200, Events: 1}}}
	got := map[string]map[string]ProjectionRow{"accounting": {"USD": {Amount: 100, Events: 1}}, "audit": {}}
	msg, bad := diffValues(want, got)
	if !bad || msg != "want {accounting: {USD: {amount: 200, events: 1}}}\n got {accounting: {USD: {amount: 100, events: 1}}, audit: {}}\n(-want +got)\n"+
		"- accounting.USD.amount: 200\n+ accounting.USD.amount: 100\n+ audit: {}" {
		t.Errorf("got %q", msg)
	}
	// What only one side has is listed leaf by leaf, in the language's names.
	msg, _ = diffValues(want, map[string]map[string]ProjectionRow{"audit": {"EUR": {Amount: 5, Events: 1}}})
	if !strings.HasSuffix(msg, "(-want +got)\n- accounting.USD.amount: 200\n- accounting.USD.events: 1\n+ audit.EUR.amount: 5\n+ audit.EUR.events: 1") {
		t.Errorf("got %q", msg)
	}
	if strings.ContainsAny(msg, "\t\u00a0") {
		t.Errorf("the diff holds tabs or no-break spaces: %q", msg)
	}
	// What differs only in kind, or in an empty value inside, still shows.
	for _, tc := range []struct {
		want, got any
		diff      string
	}{
		{[]any{map[string]any{"id": "42"}}, []any{map[string]any{"id": int64(42)}}, "- [0].id: \"42\"\n+ [0].id: 42"},
		{map[string]map[string]int64{"accounting": {}}, map[string]map[string]int64{}, "- accounting: {}"},
	} {
		if msg, bad := diffValues(tc.want, tc.got); !bad || !strings.HasSuffix(msg, "(-want +got)\n"+tc.diff) {
			t.Errorf("diff of %v and %v: %q, want it to end with %q", tc.want, tc.got, msg, tc.diff)
		}
	}
	if _, bad := diffValues(int64(2), int64(2)); bad {
		t.Error("equal numbers differ")
	}
	if msg, _ := diffValues(int64(2), int64(1)); msg != "want 2, got 1" {
		t.Errorf("numbers: %q", msg)
	}
}

func TestMetricComparisons(t *testing.T) {
	for _, tc := range []struct {
		src  string
		dur  bool
		got  any
		want string // "" holds, else the message
	}{
		{`"< 5s"`, true, 2 * time.Second, ""},
		{`"< 5s"`, true, 7 * time.Second, "want < 5s, got 7s"},
		{`">= 1"`, false, int64(1), ""},
		{`"!= 0"`, false, int64(0), "want != 0, got 0"},
		{`3`, false, int64(4), "want 3, got 4"},
		{`0`, true, time.Duration(0), ""},
	} {
		var n yaml.Node
		_ = yaml.Unmarshal([]byte(tc.src), &n)
		want, errs := parseMetric("t.yaml", n.Content[0], tc.dur)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", tc.src, errs)
		}
		msg, bad := diffValues(want, tc.got)
		if bad != (tc.want != "") || msg != tc.want {
			t.Errorf("%s against %v: got %q, want %q", tc.src, tc.got, msg, tc.want)
		}
	}
	for _, src := range []string{`"< soon"`, `"=> 5"`, `-1`, `[1]`} {
		var n yaml.Node
		_ = yaml.Unmarshal([]byte(src), &n)
		if _, errs := parseMetric("t.yaml", n.Content[0], src == `"< soon"`); len(errs) == 0 {
			t.Errorf("%s accepted", src)
		}
	}
}

// A relay facing the broker the scenario stopped fails as an outcome, not
// an error (issue: "fails cleanly (outcome, not crash)"), in every mode and
// with concurrent workers — unless a worker failed for another reason. The
// trace says what the anti-patterns lost; only the publish-first relays
// fail cleanly.
func TestDownFailureIsAnOutcome(t *testing.T) {
	env := &Env{brokerDown: true}
	pub := fmt.Errorf("%w: connection refused", broker.ErrPublish)
	other := errors.New("ERROR: canceling statement due to statement timeout (SQLSTATE 57014)")
	for _, tc := range []struct {
		p       RelayParams
		err     error
		outcome string // "": the step's error
	}{
		{RelayParams{Mode: "publish_first"}, pub, "failed cleanly"},
		{RelayParams{Mode: "cdc"}, pub, "failed cleanly"},
		{RelayParams{Mode: "mark_first"}, pub, "mark_first marked the rows before publishing"},
		{RelayParams{Mode: "cdc_confirm_first"}, pub, "cdc_confirm_first confirmed the slot"},
		{RelayParams{Mode: "publish_first", Workers: 2}, pipeline.WorkerErrors{pub, pub}, "failed cleanly"},
		{RelayParams{Mode: "publish_first", Workers: 2}, pipeline.WorkerErrors{pub, other}, ""},
		{RelayParams{Mode: "publish_first"}, other, ""},
	} {
		var oe *OutcomeError
		got := downFailure(env, &tc.p, tc.err)
		switch {
		case tc.outcome == "" && errors.As(got, &oe):
			t.Errorf("%+v, %v: an outcome (%s), want the step's error", tc.p, tc.err, oe.Detail)
		case tc.outcome != "" && !errors.As(got, &oe):
			t.Errorf("%+v, %v: the step's error, want an outcome saying %q", tc.p, tc.err, tc.outcome)
		case tc.outcome != "" && !strings.Contains(oe.Detail, tc.outcome):
			t.Errorf("%+v: outcome %q, want it to say %q", tc.p, oe.Detail, tc.outcome)
		}
	}
	var oe *OutcomeError
	if errors.As(downFailure(&Env{}, &RelayParams{Mode: "publish_first"}, pub), &oe) {
		t.Error("a broker the scenario did not stop: its failure is the scenario's error")
	}
}

// A projection row of nothing ({amount: 0, events: 0}) is no row, as a
// count of 0 is none: such a want holds where the read model has no row.
func TestAZeroProjectionRowIsNoRow(t *testing.T) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("{accounting: {USD: {amount: 5, events: 1}, EUR: {amount: 0, events: 0}}, billing: {EUR: {amount: 0, events: 0}}}"), &n); err != nil {
		t.Fatal(err)
	}
	got, errs := parseProjection("t.yaml", n.Content[0])
	want := map[string]map[string]ProjectionRow{"accounting": {"USD": {Amount: 5, Events: 1}}}
	if len(errs) > 0 || !cmp.Equal(got, any(want)) {
		t.Errorf("got %v (%v), want %v", got, errs, want)
	}
}
