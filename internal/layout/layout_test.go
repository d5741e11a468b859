package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/internal/testutil"
)

// TestReadmeLayoutUpToDate: README.md's layout table is what go list says
// of the module's packages. After packages move (or a doc comment
// changes), regenerate it:
//
//	go test ./internal/layout -run TestReadmeLayoutUpToDate -update
func TestReadmeLayoutUpToDate(t *testing.T) {
	root := filepath.Join("..", "..")
	table, err := Table(root)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Replace(string(readme), table)
	if err != nil {
		t.Fatalf("README.md: %v", err)
	}
	testutil.Golden(t, "README.md", []byte(got))
}

// Every package says what it holds: a package without a doc comment
// would have an empty row.
func TestEveryPackageHasADocComment(t *testing.T) {
	table, err := Table(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range strings.Split(table, "\n") {
		if strings.Contains(row, "**no package doc comment**") {
			t.Errorf("%s: add a package doc comment whose first sentence says what the package holds", strings.Fields(row)[1])
		}
	}
}

func TestReplace(t *testing.T) {
	got, err := Replace("a\n"+Begin+"\nold\n"+End+"\nb\n", "new\n")
	if want := "a\n" + Begin + "\nnew\n" + End + "\nb\n"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"a\n", Begin + "\n", End + "\n" + Begin + "\n", Begin + "\n" + End + "\n" + End + "\n"} {
		if _, err := Replace(bad, "new\n"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
