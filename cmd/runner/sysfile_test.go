package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// teamSystem copies the payments fixture (testdata/payments: its own names,
// uuid ids, its own event JSON) into a temporary directory, each edit
// (old, new, …) applied to system.yaml, each "file=old>new" to that schema
// file, and returns the copy's system.yaml.
func teamSystem(t *testing.T, edits ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"system.yaml", "producer.sql", "consumer.sql"} {
		b, err := os.ReadFile(filepath.Join("testdata", "payments", f))
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		for i := 0; i+1 < len(edits); i += 2 {
			old, repl := edits[i], edits[i+1]
			if file, rest, ok := strings.Cut(old, "="); ok && strings.HasSuffix(file, ".sql") {
				if file != f {
					continue
				}
				old = rest
			} else if f != "system.yaml" {
				continue
			}
			if !strings.Contains(src, old) {
				t.Fatalf("%s has no %q to edit", f, old)
			}
			src = strings.Replace(src, old, repl, 1)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "system.yaml")
}

// runner validate --system checks the file as run does, and its mapping
// against the team's own schema on a throwaway database pair.
func TestValidateSystem(t *testing.T) {
	sys := teamSystem(t)
	code, out, errOut := cli(t, "validate", "--system", sys)
	if code != exitOK || !strings.Contains(out, "mappings checked against their schema: "+sys) {
		t.Fatalf("the payments fixture: exit %d, want 0 with its mapping checked\n%s%s", code, out, errOut)
	}
	pay := scenarioFile(t, "pay.yaml", paymentScenario)
	if code, out, errOut := cli(t, "validate", "--system", sys, pay); code != exitOK || !strings.Contains(out, "ok: 1 scenario(s) valid") {
		t.Errorf("a scenario with --system: exit %d, want 0\n%s%s", code, out, errOut)
	}
	if code, _, errOut := cli(t, "validate", "--system", filepath.Join(filepath.Dir(sys), "nope.yaml")); code != exitInvalid || !strings.Contains(errOut, "nope.yaml") {
		t.Errorf("a missing system file: exit %d, want 2 naming it\n%s", code, errOut)
	}
	// What run refuses before running anything, validate refuses too: a
	// ${topic} (Kafka's) on the run's broker, redis unless --broker says.
	kafkaOnly := teamSystem(t, `idle: {run: [sleep, "600"]}`, `idle: {run: [sleep, "600"], env: {T: "${topic}"}}`, "brokers: [redis]", "")
	if code, _, errOut := cli(t, "validate", "--offline", "--system", kafkaOnly); code != exitInvalid || !strings.Contains(errOut, "${topic} means nothing on redis") {
		t.Errorf("${topic} on redis: exit %d, want 2 saying it means nothing there\n%s", code, errOut)
	}
	if code, out, errOut := cli(t, "validate", "--offline", "--broker", "kafka", "--system", kafkaOnly); code != exitOK {
		t.Errorf("${topic} on kafka: exit %d, want 0\n%s%s", code, out, errOut)
	}
}

// Every mapped name the schema lacks is an error at its line:col in the
// system file, with the closest existing name: from validate and from run,
// which then runs nothing.
func TestMappingCheckedAgainstTheSchema(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		edits []string
		want  string // after the file name
	}{
		{"outbox column", []string{"event_id: message_id, payload: body, unpublished", "event_id: mesage_id, payload: body, unpublished"},
			`:9:43: outbox.event_id: no column "mesage_id" in table payment_outbox (did you mean "message_id"?); its columns: body, id, message_id, sent_at`},
		{"outbox table", []string{"table: payment_outbox", "table: payment_outbx"},
			`:9:17: outbox.table: no table "payment_outbx" in the producer database after its schema (did you mean "payment_outbox"?); tables: payment_outbox`},
		{"inbox table", []string{"table: processed_messages", "table: processed_message"},
			`:11:16: inbox.table: no table "processed_message" in the consumer database after its schema (did you mean "processed_messages"?); tables: balances, processed_messages`},
		{"inbox column", []string{"consumer: handler", "consumer: handlr"},
			`:11:46: inbox.consumer: no column "handlr" in table processed_messages (did you mean "handler"?)`},
		{"inbox applied order column", []string{"event_id: message_id, payload: body}", "event_id: message_id, payload: body, applied_order: handlr}"},
			`:11:107: inbox.applied_order: no column "handlr" in table processed_messages (did you mean "handler"?)`},
		{"inbox applied order type", []string{"event_id: message_id, payload: body}", "event_id: message_id, payload: body, applied_order: body}"},
			`:11:107: inbox.applied_order: column processed_messages.body is of type jsonb: the apply order is read from a serial, bigserial or identity (an integer) or a timestamp`},
		{"unpublished", []string{"sent_at IS NULL", "sentat IS NULL"},
			`:9:83: outbox.unpublished: column "sentat" does not exist (SQLSTATE 42703) (did you mean "sent_at"?)`},
		{"projection column", []string{"amount_minor, n FROM", "amount_minr, n FROM"},
			`:12:13: projection: column "amount_minr" does not exist (SQLSTATE 42703) (did you mean "amount_minor"?)`},
		{"projection shape", []string{"currency, amount_minor, n FROM", "currency, amount_minor FROM"},
			`:12:13: projection: returns 3 column(s) (handler, currency, amount_minor); want 4: consumer id, currency, amount, events`},
		{"produce", []string{"(message_id, body) VALUES", "(mesage_id, body) VALUES"},
			`:8:10: produce: column "mesage_id" of relation "payment_outbox" does not exist (SQLSTATE 42703) (did you mean "message_id"?)`},
		{"event id type", []string{"producer.sql=message_id uuid", "message_id numeric"},
			`:9:43: outbox.event_id: payment_outbox.message_id is of type numeric: the runner can give event ids to a text, uuid, smallint, integer or bigint column only`},
		{"payload type", []string{"producer.sql=body       jsonb", "body       bytea"},
			`:9:64: outbox.payload: column payment_outbox.body is of type bytea: the runner reads payloads as JSON`},
		{"schema does not apply", []string{"consumer.sql=PRIMARY KEY (handler, currency)", "PRIMARY KEY (handler, currenc)"},
			`:7:44: schema: {dir}/consumer.sql does not apply to a fresh database: ERROR: column "currenc" named in key does not exist (SQLSTATE 42703)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := teamSystem(t, c.edits...)
			want := sys + strings.ReplaceAll(c.want, "{dir}", filepath.Dir(sys))
			code, _, errOut := cli(t, "validate", "--system", sys)
			if code != exitInvalid || !strings.Contains(errOut, want) {
				t.Errorf("validate: exit %d, want 2 with\n%s\ngot:\n%s", code, want, errOut)
			}
		})
	}
	sys := teamSystem(t, "sent_at IS NULL", "sentat IS NULL")
	pay := scenarioFile(t, "pay.yaml", paymentScenario)
	code, out, errOut := cli(t, "run", "--system", sys, pay)
	if code != exitInvalid || !strings.Contains(errOut, sys+`:9:83: outbox.unpublished: column "sentat" does not exist`) || !strings.Contains(errOut, "nothing was run") || strings.Contains(out, "PASS") || strings.Contains(out, "FAIL") {
		t.Errorf("run with a wrong mapping: exit %d, want 2 before any scenario ran\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// A fault's table=T is checked against the schema of its side, at the
// fault's on: in the scenario; a Redis command that does not exist is a
// load error.
func TestFaultTargetsChecked(t *testing.T) {
	sys := teamSystem(t)
	table := scenarioFile(t, "table.yaml", `name: a fault on a table the schema lacks
steps:
  - start: {service: idle, fault: {on: "consumer_db.commit(table=balance)", do: kill}}
`)
	code, _, errOut := cli(t, "validate", "--system", sys, table)
	if want := table + `:3:40: on: consumer_db.commit(table=balance): no table "balance" in the consumer database after its schema (did you mean "balances"?); tables: balances, processed_messages`; code != exitInvalid || !strings.Contains(errOut, want) {
		t.Errorf("a fault on a missing table: exit %d, want 2 with\n%s\ngot:\n%s", code, want, errOut)
	}
	command := scenarioFile(t, "command.yaml", `name: a fault on a command Redis does not have
steps:
  - start: {service: idle, fault: {on: "broker.reply(XAD)", do: kill}}
`)
	code, _, errOut = cli(t, "validate", "--offline", "--system", sys, command)
	// The fixture's brokers: [redis]: said in Redis's words, naming it.
	if want := command + `:3:40: broker.reply(XAD) applies on none of the brokers ` + sys + ` speaks (brokers: redis): redis: no Redis command XAD (did you mean "XADD"?)`; code != exitInvalid || !strings.Contains(errOut, want) {
		t.Errorf("a fault on XAD: exit %d, want 2 with\n%s\ngot:\n%s", code, want, errOut)
	}
}

// paymentScenario drives the payments system without its services: the
// outbox row and the stream entry carry the team's uuid and JSON.
const paymentScenario = `name: a payments event, team-shaped
steps:
  - produce: {event: bus-1, amount: 1250, currency: EUR}
  - expect:
      sql: {db: producer, query: "SELECT message_id, body #>> '{data,amountMinor}' AS amount, body->>'type' AS type FROM payment_outbox", want: [{message_id: e932ed03-a1db-55cf-8f50-49f09012efe8, amount: "1250", type: PaymentCaptured}]}
  - publish(event=bus-1)
  - expect: {stream.entries: 1}
`

// The team's payload and ids: a uuid outbox column gets the name's UUID v5
// in the database, on the wire and in the report; the trace shows both.
func TestTeamPayloadAndUUIDs(t *testing.T) {
	t.Parallel()
	sys := teamSystem(t)
	pay := scenarioFile(t, "pay.yaml", paymentScenario)
	report := filepath.Join(t.TempDir(), "report.json")
	code, out, errOut := cli(t, "run", "-v", "--json", report, "--system", sys, pay)
	if code == exitInvalid || code == exitEnvironment || strings.Contains(out, "FAIL "+pay) {
		t.Fatalf("exit %d; a step failed or the run did not start:\n%s%s", code, out, errOut)
	}
	const id = "e932ed03-a1db-55cf-8f50-49f09012efe8" // uuid.uuid5(uuid.NAMESPACE_URL, "bus-1")
	for _, want := range []string{
		"committed bus-1 (= " + id + "): 1250 EUR",
		"XADD bus-1 (= " + id + ") → entry",
		`payload {"type":"PaymentCaptured","id":"` + id + `","data":{"amountMinor":1250,"currency":"EUR"}}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenarios []struct {
			Steps []struct {
				Entries []struct {
					EventID string `json:"event_id"`
				} `json:"entries"`
			} `json:"steps"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rep.Scenarios {
		for _, st := range r.Steps {
			for _, e := range st.Entries {
				ids = append(ids, e.EventID)
			}
		}
	}
	if len(ids) != 2 || ids[0] != id || ids[1] != id {
		t.Errorf("the report's event ids %v, want the uuid for the commit and the publish:\n%s", ids, b)
	}
}

// An integer event id column gets the number a name ends in; two names
// that would be one id are an error naming both.
func TestIntegerEventIDs(t *testing.T) {
	t.Parallel()
	sys := teamSystem(t, "producer.sql=message_id uuid", "message_id bigint", "consumer.sql=message_id uuid", "message_id bigint")
	ok := scenarioFile(t, "ints.yaml", `name: bigint ids
steps:
  - produce: {event: bus-7}
  - produce: {event: bus-9}
  - expect:
      sql: {db: producer, query: "SELECT message_id, body->>'id' AS id FROM payment_outbox ORDER BY 1", want: [{message_id: 7, id: "7"}, {message_id: 9, id: "9"}]}
`)
	code, out, errOut := cli(t, "run", "-v", "--system", sys, ok)
	if code == exitInvalid || code == exitEnvironment || strings.Contains(out, "FAIL "+ok) || !strings.Contains(out, "committed bus-7 (= 7)") {
		t.Errorf("bigint ids: exit %d, a step failed:\n%s%s", code, out, errOut)
	}
	clash := scenarioFile(t, "clash.yaml", `name: two names, one id
steps:
  - produce: {event: bus-1}
  - produce: {event: refund-1}
`)
	code, out, _ = cli(t, "run", "--system", sys, clash)
	if code != exitFailed || !strings.Contains(out, "events bus-1 and refund-1 both get id 1 in payment_outbox.message_id (bigint)") {
		t.Errorf("a clash: exit %d, want 1 naming both events:\n%s", code, out)
	}
}

// A system file that lists its brokers skips a run on another one, with
// the reason, and never starts its services.
func TestUnsupportedBrokerSkips(t *testing.T) {
	sys := teamSystem(t, "brokers: [redis]", "brokers: [nats]")
	sc := scenarioFile(t, "nats-only.yaml", `name: a nats-only system on redis
steps:
  - start: idle
`)
	code, out, errOut := cli(t, "run", "--system", sys, sc)
	if want := "the system file " + sys + " supports brokers nats; this run is redis"; code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, "SKIP") {
		t.Errorf("exit %d, want 0 with the scenario skipped: %q\n%s%s", code, want, out, errOut)
	}
}

// ready: {timeout} bounds the wait for the ready line.
func TestReadyTimeoutFromTheSystemFile(t *testing.T) {
	t.Parallel()
	sys := teamSystem(t)
	sc := scenarioFile(t, "slow.yaml", `name: a service that never says it is ready
steps:
  - start: slow
`)
	start := time.Now()
	code, out, errOut := cli(t, "run", "--system", sys, sc)
	if code != exitFailed || !strings.Contains(out, `no line containing "never printed" on its output within 1s`) {
		t.Errorf("exit %d, want 1 after the 1s ready timeout:\n%s%s", code, out, errOut)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %s: the ready timeout of 1s was not used", took)
	}
}

// A sql: check PostgreSQL rejects as written fails at once, not after
// within's 15 s.
func TestPermanentSQLErrorNotRetried(t *testing.T) {
	sc := scenarioFile(t, "missing-column.yaml", `name: a check on a column that does not exist
steps:
  - produce: {event: bus-1}
  - expect:
      sql: {db: producer, query: "SELECT no_such_column FROM outbox", want: 1}
      within: 15s
`)
	start := time.Now()
	code, out, errOut := cli(t, "run", sc)
	took := time.Since(start)
	if code != exitFailed || !strings.Contains(out, `column "no_such_column" does not exist (SQLSTATE 42703)`) || !strings.Contains(out, "SQLSTATE 42703 is permanent: not retried; attempt 1 of within 15s") {
		t.Errorf("exit %d, want 1 naming the error and that it was not retried:\n%s%s", code, out, errOut)
	}
	if took > 10*time.Second {
		t.Errorf("took %s: the permanent error was retried until within", took)
	}
}
