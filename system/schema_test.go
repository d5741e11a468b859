package system

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/internal/testutil"
)

// The shipped system files match the schema, a typo does not, and the
// committed copy is current.
func TestSchema(t *testing.T) {
	testutil.Golden(t, "docs/system.schema.json", JSONSchema())
	s := compiledSchema(t)
	files, _ := filepath.Glob("../examples/*/system*.yaml")
	files = append(files, "testdata/system.yaml", "../cmd/runner/testdata/payments/system.yaml")
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(s, string(src)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		typo := strings.Replace(string(src), "outbox:", "outbx:", 1)
		if validate(s, typo) == nil {
			t.Errorf("%s with outbx: passes the schema", f)
		}
	}
}

// compiledSchema is JSONSchema compiled by a real draft 2020-12 validator.
func compiledSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("system.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("system.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(s *jsonschema.Schema, src string) error {
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		return err
	}
	b, _ := json.Marshal(v)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}
