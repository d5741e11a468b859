package scenario

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testutil"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

// compileSchema compiles Schema() with a real draft 2020-12 validator.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(schemaID)
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// validateYAML validates a YAML document against the schema, as an editor does.
func validateYAML(s *jsonschema.Schema, src string) error {
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

func TestShippedScenariosMatchTheSchema(t *testing.T) {
	s := compileSchema(t)
	files, _ := ExpandPaths([]string{"../scenarios"})
	for _, f := range files {
		src, _ := os.ReadFile(f)
		if err := validateYAML(s, string(src)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The every-key scenario uses every step, outcome and check.
	if err := validateYAML(s, testutil.RenderEveryKey("every", func(_, _ int, v string) string { return v })); err != nil {
		t.Errorf("every-key scenario: %v", err)
	}
	if err := validateYAML(s, "name: none\nexpect_violations: []\nsteps: [produce]\n"); err != nil {
		t.Errorf("expect_violations: [] (declares none): %v", err)
	}
	override := "name: o\nexpect_violations: {default: [lost], nats: []}\nnats: {msg_id: false, dedupe_window: 1s}\nsteps:\n  - consume:\n    expect: {applied: 1, nats: {applied: 0, stream.entries: 1}}\n  - expect: {within: 1s, rabbitmq: {stream.events: 1}}\n"
	if err := validateYAML(s, override); err != nil {
		t.Errorf("broker overrides: %v", err)
	}
	matrix := "name: m\nvars: {a: 5}\nmatrix: {c: [EUR, USD]}\nx-base: &b {amount: 5}\nsteps:\n  - produce: {amount: \"${a}\", currency: \"${c}\"}\n  - relay(skip_mark)\n  - expect: {within: 200ms, every: 10ms, stream.entries: 1}\n"
	if err := validateYAML(s, matrix); err != nil {
		t.Errorf("vars and matrix: %v", err)
	}
	values := "name: v\nvars: {d: 5, n: 1}\nsteps:\n  - sleep(${d}ms)\n  - consume(count=${n}0, skip_ack=1)\n  - consume(fail=divzero, fail_event=a=b)\n  - consume(fail=divzero, fail_event=x(1))\n  - claim(idle=0, skip_ack=f)\n"
	if err := validateYAML(s, values); err != nil {
		t.Errorf("shorthand values the loader takes (a ${var} inside a value, ParseBool's 1/f, = and parentheses in a string): %v", err)
	}
	if _, errs := Parse("v.yaml", []byte(values), testKinds); len(errs) > 0 {
		t.Errorf("the loader refuses the values the schema is tested to take: %v", errs)
	}
	forms := "name: f\nsteps:\n  - sleep: 100ms\n  - broker: restart\n  - producer(kill)\n  - consumer: {restart: true}\n  - relay(skip_mark):\n    name: crash\n    expect: {published: 1}\n"
	if err := validateYAML(s, forms); err != nil {
		t.Errorf("single values, aliases, a shorthand key: %v", err)
	}
}

func TestSchemaRejectsTypos(t *testing.T) {
	s := compileSchema(t)
	for _, src := range []string{
		"name: x\nsteps: [relya]\n",
		"name: x\nsteps:\n  - relya: {limit: 1}\n",
		"name: x\nsteps:\n  - produce: {amout: 5}\n",
		"name: x\nsteps:\n  - produce: {amount: 0}\n",
		"name: x\nsteps:\n  - consume: {fail: divzer}\n",
		"name: x\nsteps:\n  - claim: {idle: 5}\n",
		"name: x\nsteps:\n  - expect: {stream.entry: 1}\n",
		"name: x\nsteps:\n  - consume:\n    expect: {aplied: 1}\n",
		"name: x\nsteps:\n  - expect: {projection: {accounting: {USD: {amount: 1}}}}\n",
		"name: x\nstpes: [relay]\n",
		"steps: [relay]\n",
		"name: x\nsteps:\n  - expect: {nats: {stream.entry: 1}}\n",
		"name: x\nsteps:\n  - consume:\n    expect: {nats: {error: x}}\n",
		"name: x\nsteps:\n  - consume:\n    expect: {natz: {applied: 1}}\n",
		"name: x\nexpect_violations: [lots]\nsteps: [produce]\n",
		"name: x\nnats: {msgid: false}\nsteps: [produce]\n",
		"name: x\nsteps:\n  - relay(skip_mark): {limit: 1}\n",
		"name: x\nsteps:\n  - relya(skip_mark):\n    expect: {published: 1}\n",
		"name: x\nsteps:\n  - broker: reboot\n",
		"name: x\nsteps: [relay(skip_mrak)]\n",
		"name: x\nsteps: [consume(fail=divzer)]\n",
		"name: x\nsteps: [claim(idle=abc)]\n",
		"name: x\nsteps: [consume(consumr=x)]\n",
		"name: x\nsteps: [consume(skip_ack=maybe)]\n",
		"name: x\nsteps: [produce(amount=lots)]\n",
		"name: x\nsteps: [broker(reboot)]\n",
		"name: x\nsteps:\n  - relay(skip_mrak):\n    expect: {published: 1}\n",
		"name: x\nsteps:\n  - relay: {workers: 5}\n", // the loader's bound too
		"name: x\nsteps:\n  - broker: {}\n",          // an action is needed
		"name: x\nsteps:\n  - consumer_db:\n",
	} {
		if err := validateYAML(s, src); err == nil {
			t.Errorf("the schema accepts a broken scenario:\n%s", src)
		}
	}
}

// TestSchemaFileUpToDate: docs/scenario.schema.json is Schema() (-update
// rewrites it).
func TestSchemaFileUpToDate(t *testing.T) {
	s := Schema()
	if !strings.Contains(string(s), `"$schema": "https://json-schema.org/draft/2020-12/schema"`) {
		t.Error("not draft 2020-12")
	}
	testutil.Golden(t, "docs/scenario.schema.json", s)
}

// TestDocsScenarioLanguageUpToDate: docs/scenario-language.md is
// Reference() (-update rewrites it).
func TestDocsScenarioLanguageUpToDate(t *testing.T) {
	testutil.Golden(t, "docs/scenario-language.md", []byte(Reference()))
}
