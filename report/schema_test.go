package report_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/report"
)

const reportSchemaID = "https://github.com/outboxdrill/runner/docs/report.schema.json"

// snakeCase is a JSON key of the report: lower-case words joined by _.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestJSONKeysSnakeCase walks every type the --json report serialises,
// by reflection: each exported field has a json tag with a snake_case
// name (or "-"), never Go's field name (On, Nth, Do, Optional leaked so).
func TestJSONKeysSnakeCase(t *testing.T) {
	if bad := unTagged(reflect.TypeFor[report.JSONReport]()); len(bad) > 0 {
		t.Errorf("fields serialised without a snake_case json tag: %v", bad)
	}
	// The walk can fail: a struct with a Go-named field is found.
	type leaky struct {
		Fine string `json:"fine"`
		On   string
	}
	if bad := unTagged(reflect.TypeFor[leaky]()); len(bad) != 1 || !strings.HasSuffix(bad[0], ".On") {
		t.Errorf("a field without a tag went unseen: %v", bad)
	}
}

// unTagged are the fields reachable from t that json would name by their
// Go name or by a key that is not snake_case.
func unTagged(t reflect.Type) []string {
	var bad []string
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			walk(t.Elem())
			return
		case reflect.Struct:
		default:
			return
		}
		if seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if !snakeCase.MatchString(name) {
				bad = append(bad, t.String()+"."+f.Name)
			}
			walk(f.Type)
		}
	}
	walk(t)
	return bad
}

// TestReportSchemaUpToDate: docs/report.schema.json is generated from the
// report's types and their doc comments; every field is in it, and a key
// it does not describe is refused (additionalProperties false).
func TestReportSchemaUpToDate(t *testing.T) {
	testutil.Golden(t, "docs/report.schema.json", reportSchema(t))
}

// TestReportMatchesSchema: a real run's JSON report (a passing and a
// failing scenario) validates against the schema; one with a key the
// schema does not know does not.
func TestReportMatchesSchema(t *testing.T) {
	s := compileReportSchema(t, reportSchema(t))
	rep := reportRun(t)
	var buf bytes.Buffer
	if err := report.WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if err := ValidateReport(s, buf.Bytes()); err != nil {
		t.Errorf("the report does not match its schema: %v", err)
	}
	bad := bytes.Replace(buf.Bytes(), []byte(`"run_id"`), []byte(`"RunID"`), 1)
	if err := ValidateReport(s, bad); err == nil || !strings.Contains(err.Error(), "RunID") {
		t.Errorf("a Go-named key passed the schema: %v", err)
	}
}

// ValidateReport validates a JSON report against schema s.
func ValidateReport(s *jsonschema.Schema, doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

func compileReportSchema(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(reportSchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(reportSchemaID)
	if err != nil {
		t.Fatalf("the report schema does not compile: %v", err)
	}
	return s
}

// reportSchema is the JSON Schema of report.JSONReport: one $defs entry
// per struct type, its fields' doc comments as descriptions.
func reportSchema(t *testing.T) []byte {
	t.Helper()
	g := schemaGen{defs: map[string]any{}, docs: map[string]string{}}
	root := g.of(reflect.TypeFor[report.JSONReport]())
	doc := map[string]any{
		"$schema":     "https://json-schema.org/draft/2020-12/schema",
		"$id":         reportSchemaID,
		"title":       "outbox drill runner: the --json report of runner run",
		"description": "Generated from package report's types (go test ./report -run TestReportSchemaUpToDate -update). " + g.docs["JSONReport"],
		"$ref":        root["$ref"],
		"$defs":       g.defs,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

type schemaGen struct {
	defs map[string]any
	docs map[string]string // "Type" and "Type.Field" → doc comment
	read map[string]bool   // packages whose comments are in docs
}

// of is the schema of t (a $ref for a struct type).
func (g *schemaGen) of(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		return g.of(t.Elem())
	case reflect.Struct:
		name := t.Name()
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = nil // a recursive type refers to itself
			g.defs[name] = g.object(t)
		}
		return map[string]any{"$ref": "#/$defs/" + name}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": g.of(t.Elem())}
	case reflect.Array:
		return map[string]any{"type": "array", "items": g.of(t.Elem()), "minItems": t.Len(), "maxItems": t.Len()}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.of(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	}
	return map[string]any{"type": "integer"}
}

// object is struct t's schema: its json fields, the ones without
// omitempty required, nothing else allowed.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	g.readDocs(t.PkgPath())
	props := map[string]any{}
	var required []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		s := g.of(f.Type)
		omit := strings.Contains(opts, "omitempty")
		if k := f.Type.Kind(); !omit && (k == reflect.Slice || k == reflect.Map || k == reflect.Pointer) {
			s = map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}} // a nil one is null
		}
		if d := g.docs[t.Name()+"."+f.Name]; d != "" {
			s["description"] = d
		}
		props[name] = s
		if !omit {
			required = append(required, name)
		}
	}
	o := map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	if d := g.docs[t.Name()]; d != "" {
		o["description"] = d
	}
	return o
}

// readDocs reads the doc comments of the package at pkgPath (a package of
// this module) into g.docs.
func (g *schemaGen) readDocs(pkgPath string) {
	if g.read == nil {
		g.read = map[string]bool{}
	}
	if g.read[pkgPath] {
		return
	}
	g.read[pkgPath] = true
	_, here, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(here), "..", strings.TrimPrefix(pkgPath, "github.com/outboxdrill/runner/"))
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				return true
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				g.docs[ts.Name.Name] = text(cmpDoc(ts.Doc, gd.Doc))
				last := ""
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						d := text(cmpDoc(fl.Doc, fl.Comment))
						// "Service, Start and Process name …" documents
						// the fields after it that it names.
						if d == "" && regexp.MustCompile(`\b`+n.Name+`\b`).MatchString(last) {
							d = last
						}
						g.docs[ts.Name.Name+"."+n.Name] = d
						last = d
					}
				}
			}
			return true
		})
	}
}

func cmpDoc(a, b *ast.CommentGroup) *ast.CommentGroup {
	if a != nil {
		return a
	}
	return b
}

// text is a comment as one line.
func text(c *ast.CommentGroup) string {
	if c == nil {
		return ""
	}
	return strings.Join(strings.Fields(c.Text()), " ")
}
