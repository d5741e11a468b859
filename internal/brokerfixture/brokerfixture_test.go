package brokerfixture_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/brokerfixture"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/system"
	"github.com/outboxdrill/runner/world"
)

func TestMain(m *testing.M) { testservers.Main(m) }

const name = brokerfixture.Name

// The fixture comes after the built-in kinds: --broker all and every
// report keep their order, and Redis stays the default.
func TestRegisteredAfterTheBuiltIns(t *testing.T) {
	names := broker.Names()
	if names[0] != broker.Redis || names[len(names)-1] != name {
		t.Errorf("names %v: want redis first and the fixture last", names)
	}
}

func TestBrokerFlagParsesIt(t *testing.T) {
	if got, err := runner.ParseBrokers(name); err != nil || !slices.Equal(got, []string{name}) {
		t.Errorf("--broker %s: %v %v", name, got, err)
	}
	if got, _ := runner.ParseBrokers("all"); !slices.Contains(got, name) {
		t.Errorf("--broker all: %v lacks the fixture", got)
	}
	if _, err := runner.ParseBrokers("fixtur"); err == nil || !strings.Contains(err.Error(), `(did you mean "fixture"?)`) {
		t.Errorf("--broker fixtur: %v", err)
	}
}

// Its URL flag and variable are among run's and clean's, with its usage.
func TestURLFlagAndVariable(t *testing.T) {
	t.Setenv("RUNNER_FIXTURE_URL", "fixture://127.0.0.1:1")
	for _, clean := range []bool{false, true} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		flags := runner.BrokerFlags(fs, clean)
		f := fs.Lookup("fixture")
		if f == nil || f.DefValue != "fixture://127.0.0.1:1" || !strings.Contains(f.Usage, "the fixture server at `ADDR`") || !strings.HasSuffix(f.Usage, "(env RUNNER_FIXTURE_URL)") {
			t.Fatalf("clean=%v: flag %+v", clean, f)
		}
		if err := fs.Parse([]string{"--fixture", "fixture://127.0.0.1:2"}); err != nil {
			t.Fatal(err)
		}
		if got := runner.URLs(flags)[name]; got != "fixture://127.0.0.1:2" {
			t.Errorf("URLs: %q", got)
		}
	}
	if args := runner.ServerArgs(); !strings.HasSuffix(args, "[--kafka HOST:PORT] [--fixture ADDR]") {
		t.Errorf("clean's usage: %s", args)
	}
	if err := world.CheckURL(name, "u:s3cr3t@h"); err == nil || err.Error() != "not fixture://HOST:PORT: want fixture://HOST:PORT" {
		t.Errorf("CheckURL: %v", err)
	}
}

// The probe speaks its protocol, and names it in another's answer.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	ok := testutil.Listener(t, brokerfixture.Serve)
	if err := world.Probe(ctx, name, "fixture://"+ok, time.Second); err != nil {
		t.Errorf("the fixture server: %v", err)
	}
	redisLike := testutil.Listener(t, func(c net.Conn) { _, _ = c.Write([]byte("+PONG\r\n")) })
	err := world.Probe(ctx, name, "fixture://"+redisLike, time.Second)
	if err == nil || !strings.Contains(err.Error(), `does not speak the Fixture protocol: it answered "+PONG\r\n" (a Redis server?)`) {
		t.Errorf("a Redis-like server: %v", err)
	}
	shouts := testutil.Listener(t, func(c net.Conn) { _, _ = c.Write([]byte("FIX!")) })
	err = world.Probe(ctx, broker.Redis, "redis://"+shouts, time.Second)
	if err == nil || !strings.Contains(err.Error(), `(a fixture server?)`) {
		t.Errorf("--redis at a fixture server: %v", err)
	}
}

// A run starts its own fixture server (Start, Open, Lease) and stops it.
func TestOpenOrStart(t *testing.T) {
	var log bytes.Buffer
	w, err := world.Open(context.Background(), &world.Config{PGURL: testservers.PG(t), Parallel: 1, Log: &log}, world.Shape{Brokers: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "started the fixture server at 127.0.0.1:") {
		t.Errorf("log: %q", log.String())
	}
}

// clean cleans its server, and takes a killed run's drill-fixture-* dir.
func TestClean(t *testing.T) {
	c, err := world.Clean(context.Background(), "", map[string]string{name: "fixture://127.0.0.1:1"})
	if err != nil || !slices.Contains(c.Dropped, brokerfixture.Leftover) {
		t.Errorf("Clean: %v %v", c.Dropped, err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dead := filepath.Join(tmp, "drill-fixture-deadbeef-1")
	if err := os.Mkdir(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "drill-run-deadbeef.lease"), []byte(`{"lease":"deadbeef","pid":1}`+"\n"), 0o600); err != nil { // as a runner writes it
		t.Fatal(err)
	}
	tc, err := world.CleanTempDirs()
	if err != nil || !slices.Contains(tc.Removed, dead) {
		t.Errorf("CleanTempDirs: removed %v, %v", tc.Removed, err)
	}
}

// Its key and options are in the reference, the schema and the loader; its
// name is a per-broker override and a system file's broker.
func TestScenarioLanguage(t *testing.T) {
	ref := scenario.Reference()
	for _, want := range []string{"| `fixture` | | this scenario's fixture stream: `depth` (integer ≥ 1, default `2`): how deep the fixture stream is; `loud` (flag): the fixture shouts |",
		"`kafka`, `fixture`"} {
		if !strings.Contains(ref, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	var schema struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(scenario.Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	if p := schema.Properties[name].Properties; p["depth"] == nil || p["loud"] == nil {
		t.Errorf("the schema's fixture key: %v", p)
	}
	scs, errs := scenario.Parse("f.yaml", []byte("name: f\nfixture: {depth: 3}\nsteps:\n  - expect: {stream.entries: 1, fixture: {stream.entries: 2}}\n"), brokerfixture.Kinds())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if o := scs[0].BrokerOptions[name]; *o.(*brokerfixture.Options) != (brokerfixture.Options{Depth: 3}) {
		t.Errorf("options %+v", o)
	}
	for src, want := range map[string]string{
		"fixture: {depth: 0}": "f.yaml:2:18: fixture: depth: must be at least 1, got 0",
		"fixture: {dept: 3}":  `f.yaml:2:11: fixture: unknown key "dept" (did you mean "depth"?); known: depth, loud`,
	} {
		if _, errs := scenario.Parse("f.yaml", []byte("name: f\n"+src+"\nsteps: [produce]\n"), brokerfixture.Kinds()); len(errs) != 1 || errs[0].Error() != want {
			t.Errorf("%s: %v, want %s", src, errs, want)
		}
	}
	if !strings.Contains(string(system.JSONSchema()), `"fixture"`) {
		t.Error("a system file's brokers: cannot name the fixture")
	}
}

// The guarantees document gives it a column with its mechanisms.
func TestGuaranteesMechanisms(t *testing.T) {
	var b strings.Builder
	if err := report.WriteGuarantees(&b, &report.Report{Brokers: []string{broker.Redis, name}}); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	if !strings.Contains(doc, "| | redis | fixture |") {
		t.Error("no fixture column in the mechanisms table")
	}
	for _, m := range broker.AllMechanisms {
		if !strings.Contains(doc, "| "+string(m)+" | ") || !strings.Contains(doc, " | "+brokerfixture.Kind.Mechanisms[m]+" |") {
			t.Errorf("the %q row lacks the fixture's words", m)
		}
	}
}
