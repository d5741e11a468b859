package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/internal/testservers"
)

// --keep on a team's system: the psql hints name its own tables and its
// projection query, and each, run as printed, reads the kept database.
func TestKeepHintsTeamTables(t *testing.T) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("no psql to run the hints with")
	}
	sys := teamSystem(t)
	sc := scenarioFile(t, "kept.yaml", "name: kept, team-shaped\nsteps:\n  - produce: {event: bus-1, amount: 1250, currency: EUR}\n")
	code, out, errOut := cli(t, "run", "--keep", "all", "--system", sys, sc)
	dbs := regexp.MustCompile(`/(drill_[0-9a-f]{8}_\d+_[pc])'`).FindAllStringSubmatch(out, -1)
	defer dropKept(t, dbs)
	if code != exitOK || len(dbs) != 2 {
		t.Fatalf("exit %d, want 0 and two kept databases:\n%s%s", code, out, errOut)
	}
	want := map[string][]string{
		"kept producer DB: ": {`-c 'TABLE "payment_outbox"'`},
		"kept consumer DB: ": {`-c 'TABLE "processed_messages"'`, `-c 'SELECT handler, currency, amount_minor, n FROM balances'`},
	}
	cfg, _ := pgx.ParseConfig(testservers.PG(t))
	for prefix, args := range want {
		line := lineWith(out, prefix)
		for _, a := range args {
			if !strings.Contains(line, a) {
				t.Errorf("the hint %q lacks %s", line, a)
			}
		}
		if strings.Contains(line, "TABLE outbox") || strings.Contains(line, "TABLE inbox") || strings.Contains(line, "TABLE projection") {
			t.Errorf("the hint names the reference's tables: %s", line)
		}
		cmd := exec.Command("sh", "-c", strings.TrimPrefix(line, prefix)+" -v ON_ERROR_STOP=1")
		cmd.Env = append(os.Environ(), "PGPASSWORD="+cfg.Password)
		// The producer's outbox holds the event; nothing consumed it.
		read := map[bool]string{true: "message_id | body", false: "(1 row)"}[strings.Contains(prefix, "consumer")]
		if got, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(got), read) {
			t.Errorf("%s as printed: %v\n%s", line, err, got)
		}
	}
}

// lineWith is the first line of out that holds s, from s on.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if _, rest, ok := strings.Cut(l, s); ok {
			return s + rest
		}
	}
	return ""
}

func dropKept(t *testing.T, dbs [][]string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	for _, m := range dbs {
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{m[1]}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	}
}
