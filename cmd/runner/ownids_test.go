package main

import (
	"strings"
	"testing"
)

// An event name that already is a value of the outbox's event_id type is
// the team's own id: used as written (as PostgreSQL prints it), so the
// team's check of that value passes on a correct service; a check that
// wants something else fails, naming both values. Other names are still
// mapped, and the trace says so.
func TestOwnEventIDsKept(t *testing.T) {
	t.Parallel()
	const own = "add84b1d-f0ae-4095-94d0-fd632fac70a4"
	const bus1 = "e932ed03-a1db-55cf-8f50-49f09012efe8" // uuid5(NAMESPACE_URL, "bus-1")
	uuids := teamSystem(t)
	scenario := func(name, event, want string) string {
		return scenarioFile(t, name, `name: `+name+`
steps:
  - produce: {event: "`+event+`", amount: 1250, currency: EUR}
  - produce: {event: bus-1}
  - expect:
      sql: {db: producer, query: "SELECT message_id::text FROM payment_outbox ORDER BY id", want: [`+want+`, `+bus1+`]}
`)
	}
	for _, c := range []struct{ event, trace string }{
		{own, "committed " + own + ": 1250 EUR"},
		{strings.ToUpper(own), "committed " + strings.ToUpper(own) + " (= " + own + "): 1250 EUR"},
	} {
		ok := scenario("own.yaml", c.event, own)
		code, out, errOut := cli(t, "run", "-v", "--system", uuids, ok)
		if code != exitOK || !strings.Contains(out, c.trace) || !strings.Contains(out, "committed bus-1 (= "+bus1+")") {
			t.Errorf("%s: exit %d, want 0 with %q and bus-1's mapping in the trace:\n%s%s", c.event, code, c.trace, out, errOut)
		}
	}
	// The old mapping of the team's own UUID is no longer what is stored.
	wrong := scenario("wrong.yaml", own, "'00000000-0000-0000-0000-000000000000'")
	code, out, _ := cli(t, "run", "--system", uuids, wrong)
	if code != exitFailed || !strings.Contains(out, own) || !strings.Contains(out, "00000000-0000-0000-0000-000000000000") {
		t.Errorf("a wrong expectation: exit %d, want 1 naming the id stored and the one wanted:\n%s", code, out)
	}

	ints := teamSystem(t, "producer.sql=message_id uuid", "message_id bigint", "consumer.sql=message_id uuid", "message_id bigint")
	num := scenarioFile(t, "num.yaml", `name: own numbers
steps:
  - produce: {event: "4711"}
  - produce: {event: bus-7}
  - expect:
      sql: {db: producer, query: "SELECT message_id FROM payment_outbox ORDER BY id", want: [4711, 7]}
`)
	code, out, errOut := cli(t, "run", "-v", "--system", ints, num)
	if code != exitOK || !strings.Contains(out, "committed 4711:") || !strings.Contains(out, "committed bus-7 (= 7)") {
		t.Errorf("bigint: exit %d, want 0, 4711 as written and bus-7 mapped:\n%s%s", code, out, errOut)
	}
	numWrong := scenarioFile(t, "numwrong.yaml", `name: own numbers, a wrong check
steps:
  - produce: {event: "4711"}
  - expect:
      sql: {db: producer, query: "SELECT message_id FROM payment_outbox", want: 1}
`)
	code, out, _ = cli(t, "run", "--system", ints, numWrong)
	if code != exitFailed || !strings.Contains(out, "4711") {
		t.Errorf("a wrong number: exit %d, want 1 naming 4711:\n%s", code, out)
	}
}
