package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A system that keeps changing its read model never settles: the scenario
// (one psql session commits every 50 ms, ready once it moved: a psql
// started per change, or one still starting when settling began, took
// longer than the 300 ms quiet on a loaded machine, and the system settled)
// fails naming that, within its settle: limit, and nothing is judged on
// the moving state.
func TestASystemThatNeverSettlesIsNotJudged(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql (PostgreSQL's client) is not installed")
	}
	schema, err := filepath.Abs("../../examples/node")
	if err != nil {
		t.Fatal(err)
	}
	sys := scenarioFile(t, "system.yaml", `services:
  mover:
    run: [sh, -c, 'exec psql "$DATABASE_URL" -qc "DO \$\$ BEGIN LOOP INSERT INTO projection VALUES (''accounting'', ''USD'', 1, 1) ON CONFLICT (consumer_id, currency) DO UPDATE SET amount = projection.amount + 1; COMMIT; RAISE NOTICE ''moving''; PERFORM pg_sleep(0.05); END LOOP; END \$\$"']
    env: {DATABASE_URL: "${consumer_db.url}"}
    ready: {log: moving}
schema: {producer: `+schema+`/producer.sql, consumer: `+schema+`/consumer.sql}
produce: "INSERT INTO outbox (event_id, payload) VALUES (${event}, ${payload}::jsonb)"
outbox:     {table: outbox, event_id: event_id, payload: payload, unpublished: "published_at IS NULL"}
stream:     {event_id: event_id, payload: payload}
inbox:      {table: inbox, consumer: consumer_id, event_id: event_id, payload: payload}
projection: "SELECT consumer_id, currency, amount, events FROM projection"
`)
	sc := scenarioFile(t, "moving.yaml", `name: a read model that never stops moving
system: `+sys+`
settle: 1s
steps:
  - start: mover
`)
	code, out, errOut := cli(t, "run", sc)
	for _, want := range []string{"moving.yaml:1:7: settle: the system did not settle within 1s, so it is not judged", "the read model changed"} {
		if code != exitFailed || !strings.Contains(out, want) {
			t.Errorf("exit %d, want 1 with %q:\n%s\n%s", code, want, out, errOut)
		}
	}
	// Said as not judged, every invariant, even without -v; never a violation.
	if strings.Contains(out, "projection_mismatch: ") || !strings.Contains(out, "history: not judged: acked_without_effect, double_applied, double_published, gap, lost, out_of_order, phantom, projection_mismatch, stranded, stuck, unbalanced: the system never settled") {
		t.Errorf("a moving state was judged, or not said to be unjudged:\n%s", out)
	}
}
