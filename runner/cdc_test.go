package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/scenario"
)

// devPG is the PostgreSQL the development machines and CI run, with the
// default wal_level (replica).
const devPG = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// On a server whose wal_level is not logical a CDC scenario is skipped,
// naming the setting; the polling relay's scenarios run there as before.
func TestCDCSkippedWithoutLogicalWAL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, devPG)
	if err != nil {
		t.Skipf("no PostgreSQL at 127.0.0.1:5432 to try: %v", err)
	}
	var level string
	err = conn.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	conn.Close(ctx)
	if err != nil || level == "logical" {
		t.Skipf("the PostgreSQL at 127.0.0.1:5432 has wal_level %q (%v): nothing to show", level, err)
	}
	scs, errs := scenario.Parse("cdc.yaml", []byte("name: cdc\nsteps:\n  - produce\n  - relay: {mode: cdc}\n    expect: {published: 1}\n"), scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	p := testParams(t)
	p.PGURL = devPG
	_, res := runAll(t, p, scs)
	r := res["cdc"]
	if !strings.HasPrefix(r.Skipped, "cdc.yaml:4:5: the CDC relay needs wal_level=logical") || !strings.Contains(r.Skipped, "wal_level="+level) {
		t.Errorf("want a skip at the relay step naming wal_level=logical and the server's %s, got skipped=%q passed=%v", level, r.Skipped, r.Passed())
	}
}
