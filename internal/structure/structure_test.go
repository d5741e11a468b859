package structure

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/outboxdrill/runner"

// root is the module's root, two levels up from this package.
var root = filepath.Join("..", "..")

// brokerUsers are the directories whose code reaches brokers only through
// package broker: none of their non-test files imports a package under
// broker/ (a broker's adapter, proxy adapter or server, or the registry
// broker/kinds, which only cmd/runner and tests import).
var brokerUsers = []string{"runner", "sysrun", "system", "scenario", "steps", "explore", "report", "history"}

// clients are the broker client libraries (and kfake) the loaders must
// not link.
var clients = regexp.MustCompile(`franz|nats-io|amqp091|go-redis|kfake`)

// The scenario and system loaders link no broker client and, of the
// brokers, package broker alone: they take the kinds as a parameter.
func TestLoadersLinkNoBroker(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	cmd := exec.Command("go", "list", "-deps", "./system", "./scenario")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if clients.MatchString(dep) {
			t.Errorf("the loaders link the broker client %s", dep)
		}
		if strings.HasPrefix(dep, module+"/broker/") {
			t.Errorf("the loaders link %s: of the brokers only %s/broker", dep, module)
		}
	}
}

// No non-test file of the runner's packages imports a broker's own
// package: they name no broker.
func TestNoBrokerPackageOutsideItsDirectory(t *testing.T) {
	for _, dir := range brokerUsers {
		for path, imports := range parseDir(t, dir) {
			for _, imp := range imports {
				if strings.HasPrefix(imp, module+"/broker/") {
					t.Errorf("%s imports %s: reach brokers through package broker (Kind, Conn, Broker and its optional interfaces)", path, imp)
				}
			}
		}
	}
}

// runner/ asserts no concrete broker type, in a type switch or a type
// assertion, tests included: it asks the broker value for an optional
// interface of package broker.
func TestNoBrokerTypeSwitchInRunner(t *testing.T) {
	concrete := concreteBrokers(t)
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(root, "runner", "*.go"))
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		names := brokerImports(f, concrete)
		ast.Inspect(f, func(n ast.Node) bool {
			var types []ast.Expr
			switch n := n.(type) {
			case *ast.TypeAssertExpr:
				types = append(types, n.Type)
			case *ast.TypeSwitchStmt:
				for _, c := range n.Body.List {
					types = append(types, c.(*ast.CaseClause).List...)
				}
			}
			for _, typ := range types {
				if pkg := brokerType(typ, names); pkg != "" {
					t.Errorf("%s: a type switch or assertion on a type of %s: ask for an optional interface of package broker", fset.Position(typ.Pos()), pkg)
				}
			}
			return true
		})
	}
}

// parseDir is each non-test Go file of dir (of the module) with its
// imports.
func parseDir(t *testing.T, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[path] = append(out[path], p)
		}
	}
	return out
}

// concreteBrokers are the import paths of the broker directories: every
// directory under broker/ but the conformance suite and the registry.
func concreteBrokers(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, "broker"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "brokertest" && e.Name() != "kinds" {
			out = append(out, module+"/broker/"+e.Name())
		}
	}
	if len(out) < 4 {
		t.Fatalf("broker directories %v: fewer than the four brokers", out)
	}
	return out
}

// brokerImports maps the names f knows the packages of concrete broker
// directories by (sub-packages included) to their paths.
func brokerImports(f *ast.File, concrete []string) map[string]string {
	out := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if !slices.ContainsFunc(concrete, func(c string) bool { return p == c || strings.HasPrefix(p, c+"/") }) {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		out[name] = p
	}
	return out
}

// brokerType is the broker package typ (T, *T, a generic's T[...]) is a
// type of, "" when none.
func brokerType(typ ast.Expr, names map[string]string) string {
	for {
		switch e := typ.(type) {
		case *ast.StarExpr:
			typ = e.X
			continue
		case *ast.IndexExpr:
			typ = e.X
			continue
		case *ast.SelectorExpr:
			if id, ok := e.X.(*ast.Ident); ok {
				return names[id.Name]
			}
		}
		return ""
	}
}
