package pgwire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatements(t *testing.T) {
	for q, want := range map[string][]string{
		"COMMIT":                             {"COMMIT"},
		"commit;":                            {"commit"},
		"INSERT INTO t VALUES (';'); COMMIT": {"INSERT INTO t VALUES (';')", "COMMIT"},
		`SELECT $x$;$x$, "a;b" -- c;d` + "\n; END": {`SELECT $x$;$x$, "a;b" -- c;d`, "END"},
		"SELECT $1; /* ; */ commit work":           {"SELECT $1", "/* ; */ commit work"},
		" ; ;":                                     nil,
	} {
		if diff := cmp.Diff(want, statements(q)); diff != "" {
			t.Errorf("statements(%q) (-want +got):\n%s", q, diff)
		}
	}
}

func TestIsCommit(t *testing.T) {
	for stmt, want := range map[string]bool{
		"COMMIT": true, "commit;": true, " end ": true, "COMMIT WORK": true, "end transaction": true,
		"COMMIT PREPARED 'x'": false, "COMMIT AND CHAIN": false, "ROLLBACK": false, "SELECT 1": false, "": false,
	} {
		if got := isCommit(stmt); got != want {
			t.Errorf("isCommit(%q) = %v, want %v", stmt, got, want)
		}
	}
}

func TestOutsideTx(t *testing.T) {
	for stmt, want := range map[string]bool{
		"VACUUM outbox": true, "create index concurrently i on t (a)": true, "DROP DATABASE x": true, "ALTER SYSTEM SET x = 1": true,
		"CREATE INDEX i ON t (a)": false, "INSERT INTO t VALUES (1)": false, "": false,
	} {
		if got := outsideTx(stmt); got != want {
			t.Errorf("outsideTx(%q) = %v, want %v", stmt, got, want)
		}
	}
}
