package structure

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function of the module may be, from its
// func line to its closing brace: one screen, as the style asks.
const maxFuncLines = 80

// No function of the module's non-test code is longer than maxFuncLines:
// a longer one is split by what its parts do (the phases of a run, the
// kinds of a protocol's messages), not by line count.
func TestNoFunctionOverOneScreen(t *testing.T) {
	var long []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				rel, _ := filepath.Rel(root, path)
				long = append(long, fmt.Sprintf("%s:%d: %s is %d lines", rel, fset.Position(fd.Pos()).Line, fd.Name.Name, n))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range long {
		t.Errorf("%s, over %d: split it by what its parts do", l, maxFuncLines)
	}
}
