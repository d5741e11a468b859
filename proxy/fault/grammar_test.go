package fault_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A trigger string is parsed in exactly one function: fault.Parse. The
// module's non-test Go files are read for what reading a trigger's text
// takes: a regexp that matches one (only Parse's, used only in Parse),
// or a literal of a trigger's head or parts, "broker.reply(", "(table=",
// "(XADD)", to cut, compare or build one with (none outside this
// package, whose On prints the canonical text). Everything downstream
// passes the typed Trigger.
func TestATriggerStringIsParsedInExactlyOneFunction(t *testing.T) {
	root := moduleRoot(t)
	own := filepath.Join(root, "proxy", "fault")
	samples := []string{"broker.reply(XADD)", "broker.request(publish, topic=orders)", "consumer_db.commit(table=inbox)", "producer_db.statement()"}
	head := regexp.MustCompile(`^(broker|producer_db|consumer_db)\.(reply|request|commit|statement)(\(|$)|(broker|producer_db|consumer_db)\.(reply|request|commit|statement)\($|\(table=|^\((?:[A-Z][A-Z0-9_.+-]*|publish|deliver|ack)\)$`)
	var shapes []string // the regexps that read a trigger, where
	vars := map[string]bool{}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, path := range goFiles(t, root) {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[path] = f
		inOwn := filepath.Dir(path) == own
		for name, pat := range regexps(f) {
			if readsTrigger(pat, samples) {
				shapes = append(shapes, fset.Position(f.Package).Filename+": "+name)
				if inOwn {
					vars[name] = true
				}
			}
		}
		if !inOwn {
			for _, lit := range literals(f) {
				if v, err := strconv.Unquote(lit.Value); err == nil && head.MatchString(v) {
					t.Errorf("%s: %s reads or builds a trigger's text: pass a fault.Trigger (its On prints it)", fset.Position(lit.Pos()), lit.Value)
				}
			}
		}
	}
	if len(shapes) != 1 || len(vars) != 1 {
		t.Fatalf("the regexps that read a trigger's text: %v; want exactly one, fault.Parse's", shapes)
	}
	for path, f := range files {
		if filepath.Dir(path) == own {
			for _, fn := range usersOf(f, vars) {
				if fn != "Parse" {
					t.Errorf("%s: %s reads a trigger's text with Parse's regexp; only Parse may", path, fn)
				}
			}
		}
	}
}

// moduleRoot is the directory of go.mod above the test's.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if dir == filepath.Dir(dir) {
			t.Fatal("no go.mod above the test")
		}
	}
}

// goFiles are the module's non-test Go files.
func goFiles(t *testing.T, root string) []string {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (name == "node_modules" || name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// regexps are f's regexps compiled from a literal, by the variable they
// are assigned to ("" when none), with their pattern.
func regexps(f *ast.File) map[string]string {
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for i, v := range n.Values {
				if pat, ok := compiled(v); ok && i < len(n.Names) {
					out[n.Names[i].Name] = pat
				}
			}
			return false
		case *ast.CallExpr:
			if pat, ok := compiled(n); ok {
				out["(unnamed "+pat+")"] = pat
			}
		}
		return true
	})
	return out
}

// compiled is the pattern of regexp.MustCompile("…"), regexp.Compile, or
// lazy.Regexp (compiled on first use).
func compiled(e ast.Expr) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	x, isIdent := sel.X.(*ast.Ident)
	switch {
	case !isIdent:
		return "", false
	case x.Name == "regexp" && (strings.HasPrefix(sel.Sel.Name, "MustCompile") || strings.HasPrefix(sel.Sel.Name, "Compile")):
	case x.Name == "lazy" && sel.Sel.Name == "Regexp":
	default:
		return "", false
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok {
		return "", false
	}
	pat, err := strconv.Unquote(lit.Value)
	return pat, err == nil
}

// readsTrigger: the pattern matches a trigger's text through the
// parenthesis after its boundary (a regexp of the whole, or of its head).
func readsTrigger(pat string, samples []string) bool {
	re, err := regexp.Compile(pat)
	if err != nil {
		return false
	}
	for _, s := range samples {
		if m := re.FindStringIndex(s); m != nil && m[0] <= strings.Index(s, ".") && m[1] > strings.Index(s, "(") {
			return true
		}
	}
	return false
}

// literals are f's string literals but its struct tags.
func literals(f *ast.File) []*ast.BasicLit {
	tags := map[*ast.BasicLit]bool{}
	var out []*ast.BasicLit
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				tags[n.Tag] = true
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && !tags[n] {
				out = append(out, n)
			}
		}
		return true
	})
	return out
}

// usersOf are the functions of f that name one of vars.
func usersOf(f *ast.File, vars map[string]bool) []string {
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && vars[id.Name] {
				out = append(out, fn.Name.Name)
			}
			return true
		})
	}
	return out
}
