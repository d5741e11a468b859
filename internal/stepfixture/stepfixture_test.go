package stepfixture_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/stepfixture"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
)

const src = `name: a team's own step
steps:
  - fixture_poll(consumer=ledger, idle=5s)
  - fixture_poll(halt)
  - consume: {consumer: accounting}
`

// TestMain registers the fixture step, as a program using a team's own
// step would, before any scenario is loaded.
func TestMain(m *testing.M) {
	steps.Register(stepfixture.Step)
	os.Exit(m.Run())
}

func load(t *testing.T, src string) *scenario.Scenario {
	t.Helper()
	scs, errs := scenario.Parse("fixture.yaml", []byte(src), scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatalf("parse: %v", errs)
	}
	return scs[0]
}

// The step's own interfaces reach scheduling, capability derivation and
// the consumer ids the history checker judges.
func TestStepTraitsReachTheRunner(t *testing.T) {
	sc := load(t, src)
	if !slices.Contains(sc.Needs("redis"), broker.ClaimByIdle) {
		t.Errorf("Needs = %v, want %s from the fixture's idle", sc.Needs("redis"), broker.ClaimByIdle)
	}
	if !sc.Exclusive {
		t.Error("halt: the scenario must run alone")
	}
	if got, want := sc.Consumers(), []string{"accounting", "ledger"}; !slices.Equal(got, want) {
		t.Errorf("Consumers = %v, want %v", got, want)
	}
	calm := load(t, "name: calm\nsteps:\n  - fixture_poll\n")
	if calm.Exclusive || len(calm.Needs("redis")) > 0 {
		t.Errorf("without halt and idle: Exclusive=%v Needs=%v, want false and none", calm.Exclusive, calm.Needs("redis"))
	}
}

func TestStepIsValidated(t *testing.T) {
	for src, want := range map[string]string{
		"name: x\nsteps:\n  - fixture_poll(idel=1s)\n":       `fixture.yaml:3:18: unknown parameter "idel" (did you mean "idle"?)`,
		"name: x\nsteps:\n  - fixture_poll(idle=1s, halt)\n": "fixture.yaml:3:5: halt polls nothing: drop idle",
		"name: x\nsteps:\n  - fixture_pol\n":                 `(did you mean "fixture_poll"?)`,
	} {
		_, errs := scenario.Parse("fixture.yaml", []byte(src), scenariotest.Kinds())
		if len(errs) == 0 || !strings.Contains(errs.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", src, errs, want)
		}
	}
}

func TestStepIsInTheReferenceAndSchema(t *testing.T) {
	ref := scenario.Reference()
	for _, want := range []string{stepfixture.Name, "A fixture step defined outside package steps.", "consumer id the fixture polls as", "polled"} {
		if !strings.Contains(ref, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
	var schema map[string]any
	if err := json.Unmarshal(scenario.Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	if s := string(scenario.Schema()); !strings.Contains(s, `"`+stepfixture.Name+`"`) || !strings.Contains(s, "consumer id the fixture polls as") {
		t.Errorf("schema lacks the fixture step or its parameter")
	}
}

func TestStepDrawsItself(t *testing.T) {
	sc := load(t, src)
	r := &report.Result{Scenario: sc, Steps: []report.StepRecord{{Call: sc.Steps[0]}, {Call: sc.Steps[1], Result: steps.Result{}}}}
	d := report.SequenceDiagram(r)
	for _, want := range []string{"B->>CPG: FIXTURE POLL as ledger", "Note over B: FAULT halt (fixture.yaml:4:5)"} {
		if !strings.Contains(d, want) {
			t.Errorf("diagram lacks %q:\n%s", want, d)
		}
	}
}
