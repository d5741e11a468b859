package listen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestNoProxyPackageVarIsAssigned: a proxy's caps and timeouts are its
// Limits, given at construction, so that a test lowers them on the proxy
// it builds. A package-level variable in a proxy that a test assigns (or
// takes the address of, to assign through it), or that a function of the
// proxy assigns (a setter for tests, as fault.SetMaxRecordBytes was), is
// a limit every proxy of the process reads: the test cannot run beside
// others, and the variable invites a second way to set the limit. This
// fails on one.
func TestNoProxyPackageVarIsAssigned(t *testing.T) {
	fset := token.NewFileSet()
	pkgs := map[string]*proxyPkg{} // by directory
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		p := pkgs[filepath.Dir(path)]
		if p == nil {
			p = &proxyPkg{vars: map[string]token.Pos{}}
			pkgs[filepath.Dir(path)] = p
		}
		p.files = append(p.files, f)
		if !strings.HasSuffix(path, "_test.go") {
			p.addVars(f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for dir, p := range pkgs {
		for _, f := range p.files {
			for _, r := range assigned(f, dir) {
				q := pkgs[r.dir]
				if q == nil || !q.vars[r.id.Name].IsValid() || r.id.Obj != nil && r.id.Obj.Pos() != q.vars[r.id.Name] {
					continue // not a package-level variable of a proxy: a local, a field, a builtin
				}
				found = append(found, fset.Position(r.id.Pos()).String()+": assigns "+r.id.Name+", declared at "+fset.Position(q.vars[r.id.Name]).String())
			}
		}
	}
	sort.Strings(found)
	if len(found) > 0 {
		t.Errorf("%d assignment(s) to a proxy's package-level variable after its initializer: a cap or a wait belongs in the proxy's Limits, which a test passes to ListenWith; a table is built by its initializer:\n%s",
			len(found), strings.Join(found, "\n"))
	}
}

// proxyPkg is one package under proxy/: the package-level variables its
// non-test files declare, and all its files.
type proxyPkg struct {
	vars  map[string]token.Pos
	files []*ast.File
}

func (p *proxyPkg) addVars(f *ast.File) {
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if n.Name != "_" {
						p.vars[n.Name] = n.Pos()
					}
				}
			}
		}
	}
}

// ref is a variable a test writes: its name, and the directory of the
// package it should be declared in.
type ref struct {
	dir string
	id  *ast.Ident
}

// assigned are the variables a file in dir assigns to, increments, or
// takes the address of, in its functions and initializers: an identifier
// (the parser resolves it to a local or the file's own declaration, or
// leaves it to the package), or a proxy package's name qualified by its
// import. For x.f = and x[i] =, x counts.
func assigned(f *ast.File, dir string) []ref {
	imports := map[string]string{} // name → directory, "" outside proxy/
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := filepath.Base(path)
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = ""
		if rest, ok := strings.CutPrefix(path, "github.com/outboxdrill/runner/proxy/"); ok {
			imports[name] = filepath.Join("..", filepath.FromSlash(rest))
		}
	}
	var out []ref
	add := func(e ast.Expr) {
		id, sel := root(e)
		if id == nil {
			return
		}
		if d, isImport := imports[id.Name]; !isImport || id.Obj != nil {
			out = append(out, ref{dir, id})
		} else if d != "" && sel != nil {
			out = append(out, ref{d, sel})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok != token.DEFINE {
				for _, e := range n.Lhs {
					add(e)
				}
			}
		case *ast.IncDecStmt:
			add(n.X)
		case *ast.UnaryExpr:
			if n.Op == token.AND {
				add(n.X)
			}
		}
		return true
	})
	return out
}

// root is the variable an assigned expression writes into, and the name
// selected from it last (of pkg.Var.f: pkg and Var).
func root(e ast.Expr) (id, sel *ast.Ident) {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x, sel
		case *ast.SelectorExpr:
			e, sel = x.X, x.Sel
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return nil, nil
		}
	}
}
