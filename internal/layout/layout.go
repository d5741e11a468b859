// Package layout generates the README's layout table from go list: every
// package of the module, the first sentence of its package doc comment and
// the module's packages it imports.
package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Begin and End mark the generated table in README.md.
const (
	Begin = "<!-- layout:begin -->"
	End   = "<!-- layout:end -->"
)

// pkg is what go list says of a package.
type pkg struct {
	ImportPath string
	Doc        string // the first sentence of the package doc comment
	Imports    []string
	Module     *struct{ Path string }
}

// Table is the Markdown table of the packages `go list ./...` finds in the
// module at root, in go list's order (by import path).
func Table(root string) (string, error) {
	pkgs, err := list(root)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| package | holds (the first sentence of its doc comment) | imports (project packages) |\n|---|---|---|\n")
	for _, p := range pkgs {
		if p.Module == nil {
			return "", fmt.Errorf("go list: %s is in no module", p.ImportPath)
		}
		mod := p.Module.Path
		var imports []string
		for _, im := range p.Imports {
			if rel, ok := strings.CutPrefix(im, mod+"/"); ok {
				imports = append(imports, rel)
			}
		}
		if len(imports) == 0 {
			imports = []string{"—"}
		}
		doc := p.Doc
		if doc == "" {
			doc = "**no package doc comment**"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/"),
			strings.ReplaceAll(doc, "|", `\|`), strings.Join(imports, ", "))
	}
	return b.String(), nil
}

// list runs go list in root.
func list(root string) ([]pkg, error) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Doc,Imports,Module", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list ./...: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list ./...: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

// Replace puts table between the Begin and End lines of readme (each
// once, Begin first), in place of what was there.
func Replace(readme, table string) (string, error) {
	before, rest, ok := strings.Cut(readme, Begin+"\n")
	if !ok {
		return "", fmt.Errorf("no line %s", Begin)
	}
	_, after, ok := strings.Cut(rest, End+"\n")
	if !ok {
		return "", fmt.Errorf("no line %s after %s", End, Begin)
	}
	if strings.Contains(after, Begin) || strings.Contains(after, End) {
		return "", fmt.Errorf("%s and %s must each occur once", Begin, End)
	}
	return before + Begin + "\n" + table + End + "\n" + after, nil
}
