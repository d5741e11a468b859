package main

import (
	"strings"
	"testing"
)

// A consumer that prints no ready line, ready: {on:
// broker.request(XREADGROUP)}: the reference consumer's start waits for
// its first read, says so, and the drill passes; one waiting for an XACK
// that never comes fails its start at the timeout, naming the crossings
// its proxies saw instead; a ready on a table the schema lacks is a load
// error with the closest table; list --system shows what each waits for.
func TestReadyOnTheFirstCrossing(t *testing.T) {
	t.Parallel()
	setProcessEnv(t, "RUNNER_BIN", runnerBin(t))
	services := func(ready string) string {
		return `  relay:    {run: ["${runner}", reference, relay], env: {DATABASE_URL: "${producer_db.url}", REDIS_URL: "${broker.url}", STREAM: "${stream}"}, ready: {log: ready}}
  consumer: {run: ["${runner}", reference, consumer], env: {DATABASE_URL: "${consumer_db.url}", REDIS_URL: "${broker.url}", STREAM: "${stream}", GROUP: "${consumer}"}, ready: ` + ready + `}
`
	}
	drill := "steps:\n  - produce(event=bus-1)\n  - start: relay\n  - start: consumer\n  - expect: {inbox.rows: 1, within: 5s}\n"
	sys := onReferenceSchemas(t, t.TempDir(), services("{on: broker.request(XREADGROUP)}"))
	sc := scenarioFile(t, "ready.yaml", "name: ready at the first XREADGROUP\nsystem: "+sys+"\n"+drill)
	code, out, errOut := cli(t, "run", "-v", sc)
	if code != exitOK || !strings.Contains(out, "started consumer (pid ") || !strings.Contains(out, "; ready at its first broker.request(XREADGROUP)") {
		t.Errorf("exit %d, want 0 with the start ready at its first XREADGROUP:\n%s\n%s", code, out, errOut)
	}
	code, out, _ = cli(t, "list", "--system", sys, sc)
	if code != exitOK || !strings.Contains(out, "on broker.request(XREADGROUP)") || !strings.Contains(out, `log "ready"`) {
		t.Errorf("list --system: exit %d:\n%s", code, out)
	}

	never := onReferenceSchemas(t, t.TempDir(), services("{on: broker.request(XACK), timeout: 3s}"))
	sc = scenarioFile(t, "never.yaml", "name: no XACK comes\nsystem: "+never+"\nsteps:\n  - start: consumer\n")
	code, out, _ = cli(t, "run", sc)
	if want := "service consumer: no crossing of broker.request(XACK) (its proxies saw "; code != exitFailed || !strings.Contains(out, want) ||
		!strings.Contains(out, "broker.XREADGROUP→empty ×") || !strings.Contains(out, ") within 3s; its output:") {
		t.Errorf("exit %d, want 1 with %q and the XREADGROUPs seen:\n%s", code, want, out)
	}

	table := onReferenceSchemas(t, t.TempDir(), services(`{on: "consumer_db.commit(table=inbx)"}`))
	sc = scenarioFile(t, "table.yaml", "name: a table the schema lacks\nsystem: "+table+"\n"+drill)
	code, _, errOut = cli(t, "validate", sc)
	if want := `: services: consumer: ready: on: consumer_db.commit(table=inbx): no table "inbx" in the consumer database after its schema (did you mean "inbox"?)`; code != exitInvalid || !strings.Contains(errOut, table+":3:") || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, want 2 with %q at the file's line 3:\n%s", code, want, errOut)
	}
}
