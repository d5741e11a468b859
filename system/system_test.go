package system

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outboxdrill/runner/proxy/fault"
)

// The issue's own example loads as written: services with argv, env and
// ready text, schema paths from the file's directory, produce with bound
// parameters, and every mapping.
func TestLoadTheContractExample(t *testing.T) {
	s, errs, err := Load(context.Background(), "testdata/system.yaml", testKinds)
	if err != nil || len(errs) > 0 {
		t.Fatalf("load: %v %v", err, errs)
	}
	if got := s.Names(); !slices.Equal(got, []string{"consumer", "relay"}) {
		t.Errorf("services %v", got)
	}
	relay := s.Services["relay"]
	want := &Service{Name: "relay", Pos: relay.Pos, Run: []string{"node", "relay.js"}, Ready: "ready",
		Env:    map[string]string{"DATABASE_URL": "${producer_db.url}", "REDIS_URL": "${broker.url}", "STREAM": "${stream}"},
		RunPos: relay.RunPos, EnvPos: relay.EnvPos}
	if diff := cmp.Diff(want, relay); diff != "" || relay.Pos.Line != 2 || relay.Pos.Col != 3 {
		t.Errorf("relay at %s (-want +got):\n%s", relay.Pos, diff)
	}
	if s.Schema.Producer != filepath.Join("testdata", "producer.sql") || s.Schema.Consumer != filepath.Join("testdata", "consumer.sql") {
		t.Errorf("schema %+v", s.Schema)
	}
	if s.Produce != "INSERT INTO outbox (event_id, payload) VALUES ($1, $2)" || !slices.Equal(s.ProduceArgs, []string{"event", "payload"}) {
		t.Errorf("produce %q %v", s.Produce, s.ProduceArgs)
	}
	if s.Outbox != (Outbox{"outbox", "event_id", "payload", "published_at IS NULL"}) || s.Stream.EventID != "event_id" || s.Stream.Payload != "payload" || s.Stream.EventIDPos.Line == 0 ||
		s.Inbox != (Inbox{Table: "inbox", Consumer: "consumer_id", EventID: "event_id", Payload: "payload"}) || !strings.HasPrefix(s.Projection, "SELECT consumer_id") {
		t.Errorf("mappings %+v %+v %+v %q", s.Outbox, s.Stream, s.Inbox, s.Projection)
	}
}

// Every broken system file names the place and what is wrong, with the
// closest known word when one is misspelt.
func TestLoadErrors(t *testing.T) {
	const ok = "services: {relay: {run: [x]}}\nproduce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	for _, c := range []struct{ name, src, want string }{
		{"unknown top key", ok + "projektion: x\n", `f.yaml:6:1: unknown key "projektion" (did you mean "projection"?)`},
		{"missing key", "services: {relay: {run: [x]}}\n", "f.yaml:1:1: missing produce"},
		{"unknown service key", strings.Replace(ok, "run: [x]", "run: [x], readyy: {log: a}", 1), `f.yaml:1:30: relay: unknown key "readyy" (did you mean "ready"?)`},
		{"run missing", strings.Replace(ok, "run: [x]", "env: {A: b}", 1), "f.yaml:1:19: relay: missing run"},
		{"run not a list", strings.Replace(ok, "run: [x]", "run: x", 1), "f.yaml:1:25: run: want a non-empty list"},
		{"bad produce param", strings.Replace(ok, "${event}", "${evnt}", 1), `f.yaml:2:10: produce: unknown ${evnt} (did you mean "event"?)`},
		{"bad table name", strings.Replace(ok, "table: o,", "table: \"o; DROP\",", 1), `f.yaml:3:17: "o; DROP" is not a table or column name`},
		{"missing mapping field", strings.Replace(ok, "stream: {event_id: e, payload: p}", "stream: {event_id: e}", 1), "f.yaml:4:9: stream: missing payload"},
		{"missing schema file", ok + "schema: {producer: nope.sql}\n", "f.yaml:6:20: schema.producer: nope.sql: no such file or directory"},
		{"ready timeout not a duration", strings.Replace(ok, "run: [x]", "run: [x], ready: {log: up, timeout: soon}", 1), `f.yaml:1:56: ready: timeout: want a positive duration such as 60s or 2m, got "soon"`},
		{"ready timeout alone", strings.Replace(ok, "run: [x]", "run: [x], ready: {timeout: 10s}", 1), "f.yaml:1:37: ready: want log: TEXT (a line of the service's output), on: BOUNDARY"},
		{"ready key misspelt", strings.Replace(ok, "run: [x]", "run: [x], ready: {no: x}", 1), `f.yaml:1:38: ready: unknown key "no" (did you mean "on"?); known: log, on, timeout`},
		{"ready on unknown boundary", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: broker.requst(XREADGROUP)}", 1), `f.yaml:1:42: ready: on: broker has no boundary "requst" (did you mean "request"?); it has: reply, request`},
		{"ready on unknown link", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: consumer_bd.commit()}", 1), `f.yaml:1:42: ready: on: unknown link "consumer_bd" (did you mean "consumer_db"?)`},
		{"ready on bad filter", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: consumer_db.commit(tabel=inbox)}", 1), `f.yaml:1:42: ready: on: consumer_db.commit takes (table=NAME) or (); got (tabel=inbox) (did you mean "table"?)`},
		{"ready on misspelt command", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: broker.request(XREADGRUP)}", 1) + "brokers: [redis]\n", `f.yaml:1:42: services: relay: ready: on: broker.request(XREADGRUP) is an operation of none of the file's brokers: redis: no Redis command XREADGRUP (did you mean "XREADGROUP"?)`},
		{"ready on a command of another broker", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: broker.request(XREADGROUP)}", 1) + "brokers: [redis, kafka]\n", `f.yaml:1:42: services: relay: ready: on: broker.request(XREADGROUP) does not apply on kafka: unknown operation "XREADGROUP"`},
		{"ready on a command of no broker", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: broker.request(XREADGRUP)}", 1), `f.yaml:1:42: services: relay: ready: on: broker.request(XREADGRUP): no Redis command XREADGRUP (did you mean "XREADGROUP"?)`},
		{"ready on not text", strings.Replace(ok, "run: [x]", "run: [x], ready: {on: [a]}", 1), `f.yaml:1:42: ready: on: want a non-empty string`},
		{"unknown broker", ok + "brokers: [redis, nast]\n", `f.yaml:6:18: brokers: unknown broker "nast" (did you mean "nats"?); brokers: redis, nats, rabbitmq, kafka`},
		{"broker twice", ok + "brokers: [redis, redis]\n", "f.yaml:6:18: brokers: redis given twice"},
		{"brokers not a list", ok + "brokers: redis\n", "f.yaml:6:10: brokers: want a non-empty list"},
		{"env key with =", strings.Replace(ok, "run: [x]", `run: [x], env: {"A=B": c}`, 1), `f.yaml:1:36: env: "A=B" is not a variable name`},
		{"empty env key", strings.Replace(ok, "run: [x]", `run: [x], env: {"": c}`, 1), `f.yaml:1:36: env: "" is not a variable name`},
		{"env key with a digit first", strings.Replace(ok, "run: [x]", `run: [x], env: {1A: c}`, 1), `f.yaml:1:36: env: "1A" is not a variable name`},
		{"yaml syntax", "services: [\n", "f.yaml:"},
		{"not a map", "- a\n", "f.yaml:1:1: a system file is a map"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Parse("f.yaml", []byte(c.src), testKinds)
			if len(errs) == 0 || !strings.Contains(errs.Error(), c.want) {
				t.Errorf("errors:\n%v\nwant one containing %q", errs, c.want)
			}
		})
	}
	if _, errs := Parse("f.yaml", []byte(ok), testKinds); len(errs) > 0 {
		t.Errorf("the control file has errors: %v", errs)
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"stream": "s1", "broker.url": "redis://127.0.0.1:1/0"}
	if got, err := Expand("${broker.url}#${stream}", vars); err != nil || got != "redis://127.0.0.1:1/0#s1" {
		t.Errorf("expand: %q %v", got, err)
	}
	if _, err := Expand("${strem}", vars); err == nil || !strings.Contains(err.Error(), `unknown ${strem} (did you mean "stream"?)`) {
		t.Errorf("expand unknown: %v", err)
	}
}

// ready: {log, timeout} bounds the wait for the log line; without timeout
// the runner's default holds (0).
func TestReadyTimeout(t *testing.T) {
	src := "services: {relay: {run: [x], ready: {log: up, timeout: 90s}}, consumer: {run: [y], ready: {log: up}}}\nproduce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	s, errs := Parse("f.yaml", []byte(src), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if got := s.Services["relay"].ReadyTimeout; got != 90*time.Second {
		t.Errorf("relay ready timeout %s, want 1m30s", got)
	}
	if got := s.Services["consumer"].ReadyTimeout; got != 0 {
		t.Errorf("consumer ready timeout %s, want 0 (the default)", got)
	}
}

// brokers: lists the brokers the services support; a run on another is
// skipped with the reason, and a file without the key supports them all.
func TestBrokers(t *testing.T) {
	const base = "services: {relay: {run: [x]}}\nproduce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	s, errs := Parse("f.yaml", []byte(base+"brokers: [redis, kafka]\n"), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if why := s.Unsupported("redis"); why != "" {
		t.Errorf("redis is listed, yet: %s", why)
	}
	if why := s.Unsupported("nats"); why != "the system file f.yaml supports brokers redis, kafka; this run is nats" {
		t.Errorf("nats: %q", why)
	}
	all, errs := Parse("f.yaml", []byte(base), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, b := range []string{"redis", "nats", "rabbitmq", "kafka"} {
		if why := all.Unsupported(b); why != "" {
			t.Errorf("no brokers: key, yet %s is unsupported: %s", b, why)
		}
	}
}

const teamEvent = `event:
  payload: {type: PaymentCaptured, id: "${event}", data: {amountMinor: "${amount}", currency: "${currency}", note: "${from} pays ${to}", version: "${version}", tags: [a, 1, true, null]}}
  amount: data.amountMinor
  currency: data.currency
`

// The team's payload: the template rendered with the event's values, the
// amount a JSON number, every other ${…} as text; the paths kept.
func TestEventPayload(t *testing.T) {
	const base = "services: {relay: {run: [x]}}\nproduce: \"SELECT ${event}, ${payload}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	s, errs := Parse("f.yaml", []byte(base+teamEvent), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	got, err := s.Payload(map[string]string{"event": "bus-1", "amount": "1250", "currency": "EUR", "from": "alice", "to": "bob"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"PaymentCaptured","id":"bus-1","data":{"amountMinor":1250,"currency":"EUR","note":"alice pays bob","version":null,"tags":["a",1,true,null]}}`
	if got != want {
		t.Errorf("payload\n got %s\nwant %s", got, want)
	}
	if !slices.Equal(s.Event.AmountPath, []string{"data", "amountMinor"}) || !slices.Equal(s.Event.CurrencyPath, []string{"data", "currency"}) || !slices.Equal(s.Event.EventIDPath, []string{"id"}) {
		t.Errorf("paths %v %v %v", s.Event.AmountPath, s.Event.CurrencyPath, s.Event.EventIDPath)
	}
	// The version where the template puts "${version}"; no aggregate
	// mapped: per-aggregate order is not judged.
	if !slices.Equal(s.Event.VersionPath, []string{"data", "version"}) || s.Event.AggregatePath != nil {
		t.Errorf("order paths: aggregate %v, version %v", s.Event.AggregatePath, s.Event.VersionPath)
	}
	if p := s.At("event.amount"); p.Line != 8 || p.Col != 11 {
		t.Errorf("event.amount at %s, want f.yaml:8:11", p)
	}
	// Without amount: and currency: the paths are where the template puts
	// ${amount} and ${currency}.
	derived, errs := Parse("f.yaml", []byte(base+"event: {payload: {m: {a: \"${amount}\", c: \"${currency}\"}}}\n"), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	ordered, errs := Parse("f.yaml", []byte(base+"event: {payload: {acct: {id: \"${aggregate}\"}, v: \"${version}\"}, version: v}\n"), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !slices.Equal(ordered.Event.AggregatePath, []string{"acct", "id"}) || !slices.Equal(ordered.Event.VersionPath, []string{"v"}) {
		t.Errorf("order paths: aggregate %v, version %v", ordered.Event.AggregatePath, ordered.Event.VersionPath)
	}
	if !slices.Equal(derived.Event.AmountPath, []string{"m", "a"}) || !slices.Equal(derived.Event.CurrencyPath, []string{"m", "c"}) {
		t.Errorf("derived paths %v %v", derived.Event.AmountPath, derived.Event.CurrencyPath)
	}
	if _, err := derived.Payload(map[string]string{"amount": "12.5"}); err == nil || !strings.Contains(err.Error(), `${amount} is "12.5", not a whole number`) {
		t.Errorf("a fractional amount: %v", err)
	}
	plain, errs := Parse("f.yaml", []byte(base), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if plain.Event.Templated() || plain.Event.AmountPath != nil {
		t.Errorf("no event: key, yet %+v", plain.Event)
	}
	if _, err := plain.Payload(nil); err == nil {
		t.Error("Payload without a template: no error")
	}
}

func TestEventErrors(t *testing.T) {
	const base = "services: {relay: {run: [x]}}\nproduce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	for _, c := range []struct{ name, src, want string }{
		{"misspelt path", strings.Replace(teamEvent, "amount: data.amountMinor", "amount: data.amountMinr", 1),
			`f.yaml:8:11: event: amount: event.payload has no field data.amountMinr (did you mean "data.amountMinor"?); its fields: type, id, data.amountMinor`},
		{"unknown placeholder", strings.Replace(teamEvent, `"${currency}"`, `"${curency}"`, 1), `f.yaml:7:95: event: payload: unknown ${curency} (did you mean "currency"?)`},
		{"payload placeholder", strings.Replace(teamEvent, `"${event}"`, `"${payload}"`, 1), "event: payload: unknown ${payload}"},
		{"payload not a map", "event: {payload: \"${event}\"}\n", "f.yaml:6:18: event: payload: want a map"},
		{"bad path", "event: {amount: \"data['x']\"}\n", `f.yaml:6:17: event: amount: "data['x']" is not a dotted path`},
		{"misspelt aggregate path", teamEvent + "  aggregate: data.acount\n",
			`f.yaml:10:14: event: aggregate: event.payload has no field data.acount; its fields: type, id, data.amountMinor`},
		{"aggregate without a version", "event: {aggregate: aggregate}\n",
			`f.yaml:6:20: event: aggregate without event.version (the system file has no event.payload): per-aggregate order needs both, the aggregate and its version; add version: PATH`},
		{"version without an aggregate", "event: {version: version}\n",
			`f.yaml:6:18: event: version without event.aggregate (the system file has no event.payload)`},
		{"version without a template aggregate", teamEvent + "  version: id\n",
			`f.yaml:10:12: event: version without event.aggregate (event.payload has no field that is exactly "${aggregate}")`},
		{"misspelt path in the runner's own payload", "event: {aggregate: agregate, version: version}\n",
			`f.yaml:6:20: event: aggregate: the runner's own payload (the system file has no event.payload) has no field agregate (did you mean "aggregate"?); its fields: event_id, from, to, amount, currency, aggregate, version`},
		{"aggregate path near another key's field", "event: {aggregate: acount, version: version}\n",
			`f.yaml:6:20: event: aggregate: the runner's own payload (the system file has no event.payload) has no field acount (did you mean "aggregate"?)`},
		{"amount path misspelt", "event: {amount: amout}\n", `f.yaml:6:17: event: amount: the runner's own payload (the system file has no event.payload) has no field amout (did you mean "amount"?)`},
		{"nested path in the runner's own payload", "event: {aggregate: aggregate, version: data.version}\n",
			`f.yaml:6:40: event: version: the runner's own payload (the system file has no event.payload) has no field data.version`},
		{"unknown event key", "event: {amout: a}\n", `f.yaml:6:9: event: unknown key "amout" (did you mean "amount"?)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := Parse("f.yaml", []byte(base+c.src), testKinds)
			if len(errs) == 0 || !strings.Contains(errs.Error(), c.want) {
				t.Errorf("errors:\n%v\nwant one containing %q", errs, c.want)
			}
		})
	}
}

// The catalog checks a fault's table as the parser and the proxy read it:
// a boundary without a table matches any, and passes (it was refused as
// "no table \"\"" on the consumer's side); a table the schema lacks is
// refused with the closest one.
func TestCheckFaultReadsTheTriggerAsTheProxyDoes(t *testing.T) {
	c := &Catalog{}
	c.tables[ConsumerSide] = []table{{schema: "public", name: "inbox", visible: true}}
	c.tables[ProducerSide] = []table{{schema: "public", name: "outbox", visible: true}}
	for _, on := range []string{"consumer_db.commit()", "producer_db.statement()", "consumer_db.commit(table=INBOX)", "consumer_db.statement(table=public.inbox)", "broker.reply(XADD)"} {
		tr, probs := fault.Parse(fault.Spec{On: on, Nth: 1, Do: "kill"}, nil)
		if len(probs) > 0 {
			t.Fatal(probs)
		}
		if err := c.CheckFault(tr); err != nil {
			t.Errorf("%s: %v", on, err)
		}
	}
	tr, _ := fault.Parse(fault.Spec{On: "consumer_db.commit(table=inbx)", Nth: 1, Do: "kill"}, nil)
	if err := c.CheckFault(tr); err == nil || !strings.Contains(err.Error(), `consumer_db.commit(table=inbx): no table "inbx" in the consumer database after its schema (did you mean "inbox"?)`) {
		t.Errorf("a misspelt table: %v", err)
	}
}

// A service's variants: per broker: its run replaces the service's, its
// env goes over the service's, its ready replaces; a broker without one
// runs the service as written. Each mistake is said where it is written.
func TestVariants(t *testing.T) {
	const rest = "produce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	src := `services:
  relay:
    run: [node, relay.js]
    env: {DB: "${producer_db.url}", URL: "${broker.url}"}
    ready: {log: ready}
    variants:
      kafka: {run: [node, kafka-relay.js], env: {URL: "${broker.address}", TOPIC: "${topic}"}, ready: {log: "kafka ready", timeout: 20s}}
      nats: {env: {SUBJECT: "${subject}"}}
`
	s, errs := Parse("f.yaml", []byte(src+rest), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	k := s.On("kafka").Services["relay"]
	if !slices.Equal(k.Run, []string{"node", "kafka-relay.js"}) || k.Ready != "kafka ready" || k.ReadyTimeout != 20*time.Second || k.Variants != nil ||
		!cmp.Equal(k.Env, map[string]string{"DB": "${producer_db.url}", "URL": "${broker.address}", "TOPIC": "${topic}"}) || k.RunPos[1].Line != 7 {
		t.Errorf("on kafka: %+v", k)
	}
	n := s.On("nats").Services["relay"]
	if !slices.Equal(n.Run, []string{"node", "relay.js"}) || n.Ready != "ready" || n.Env["SUBJECT"] != "${subject}" || n.Env["URL"] != "${broker.url}" {
		t.Errorf("on nats: %+v", n)
	}
	if r := s.On("redis").Services["relay"]; !cmp.Equal(r.Env, map[string]string{"DB": "${producer_db.url}", "URL": "${broker.url}"}) || s.Services["relay"].Env["TOPIC"] != "" {
		t.Errorf("on redis, or the file's own service, changed: %+v", r)
	}
	for _, c := range []struct{ src, want string }{
		{strings.Replace(src, "kafka: {run", "kafak: {run", 1), `f.yaml:7:7: services: relay: variants: unknown broker "kafak" (did you mean "kafka"?)`},
		{strings.Replace(src, "    run: [node, relay.js]\n", "", 1), "f.yaml:2:3: services: relay: missing run: it runs on redis, nats, rabbitmq without a variant that gives one"},
		{src + "brokers: [kafka]\n", "f.yaml:8:7: services: relay: variants: nats is not among the file's brokers (kafka)"},
		{src + "brokers: [redis, nats]\n", "f.yaml:7:7: services: relay: variants: kafka is not among the file's brokers (redis, nats): add it there, or drop the variant"},
		{strings.Replace(src, "nats: {env", "nats: {rn: [x], env", 1), `f.yaml:8:14: relay: variants: nats: unknown key "rn" (did you mean "run"?)`},
		{strings.Replace(src, "${subject}", "${topic}", 1) + "brokers: [kafka, nats]\n", "f.yaml:8:29: services: relay: env SUBJECT: ${topic} means nothing on nats"},
	} {
		_, errs := Parse("f.yaml", []byte(c.src+rest), testKinds)
		if !strings.Contains(errs.Error(), c.want) {
			t.Errorf("want %q in:\n%v", c.want, errs)
		}
	}
}

// ready: {on: …} is a fault's boundary, read by its parser: alone, or with
// log (both awaited), bounded by timeout; a variant's ready replaces the
// service's whole (its on: too), and a broker boundary is judged on each
// broker the file lists, its variant's there.
func TestReadyOn(t *testing.T) {
	const rest = "produce: \"SELECT ${event}\"\noutbox: {table: o, event_id: e, payload: p, unpublished: \"true\"}\nstream: {event_id: e, payload: p}\ninbox: {table: i, consumer: c, event_id: e, payload: p}\n"
	src := `services:
  consumer:
    run: [./consumer]
    ready: {on: broker.request(xreadgroup), timeout: 5s}
    variants:
      kafka: {ready: {log: joined, on: "consumer_db.commit(table=inbox)"}}
  relay: {run: [./relay], ready: {log: up, on: broker.reply(publish)}}
brokers: [redis, kafka]
`
	s, errs := Parse("f.yaml", []byte(src+rest), testKinds)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	c := s.Services["consumer"]
	if c.ReadyOn == nil || c.ReadyOn.On() != "broker.request(XREADGROUP)" || c.Ready != "" || c.ReadyTimeout != 5*time.Second || c.ReadyOnPos.Line != 4 || c.ReadyOnPos.Col != 17 {
		t.Errorf("consumer: ready on %v at %v, log %q, timeout %s", c.ReadyOn, c.ReadyOnPos, c.Ready, c.ReadyTimeout)
	}
	if k := c.On("kafka"); k.ReadyOn.On() != "consumer_db.commit(table=inbox)" || k.Ready != "joined" || k.ReadyTimeout != 0 || k.ReadyOnPos.Line != 6 {
		t.Errorf("consumer on kafka: ready on %v at %v, log %q, timeout %s; want the variant's whole", k.ReadyOn, k.ReadyOnPos, k.Ready, k.ReadyTimeout)
	}
	if r := s.Services["relay"]; r.Ready != "up" || r.ReadyOn.On() != "broker.reply(publish)" {
		t.Errorf("relay: log %q, on %v", r.Ready, r.ReadyOn)
	}
	for svc, want := range map[*Service]string{
		c:                   "",
		c.On("kafka"):       "",
		s.Services["relay"]: "",
	} {
		if got := ReadySkip(svc, "redis"); got != want {
			t.Errorf("%s on redis: %q", svc.Name, got)
		}
	}
	if got := ReadySkip(c, "nats"); !strings.Contains(got, `broker.request(XREADGROUP) does not apply on nats: unknown operation "XREADGROUP"`) {
		t.Errorf("the consumer's XREADGROUP on nats: %q", got)
	}
	// The Kafka variant without a ready of its own keeps the service's
	// XREADGROUP, which no Kafka proxy counts.
	bare := strings.Replace(src, "{ready: {log: joined, on: \"consumer_db.commit(table=inbox)\"}}", "{run: [./kafka-consumer]}", 1)
	_, errs = Parse("f.yaml", []byte(bare+rest), testKinds)
	if want := `f.yaml:4:17: services: consumer: ready: on: broker.request(XREADGROUP) does not apply on kafka: unknown operation "XREADGROUP"`; !strings.Contains(errs.Error(), want) ||
		!strings.Contains(errs.Error(), "give the service a variant for it with a ready of its own") {
		t.Errorf("errors:\n%v\nwant one containing %q", errs, want)
	}
	// A typo is said in the listed brokers' words, without a variant's hint.
	typo := strings.Replace(bare, "xreadgroup", "xreadgrup", 1)
	_, errs = Parse("f.yaml", []byte(typo+rest), testKinds)
	if want := `f.yaml:4:17: services: consumer: ready: on: broker.request(xreadgrup) is an operation of none of the file's brokers: redis: no Redis command XREADGRUP (did you mean "XREADGROUP"?); kafka: unknown operation "xreadgrup"`; len(errs) != 1 || !strings.Contains(errs.Error(), want) {
		t.Errorf("errors:\n%v\nwant one line %q", errs, want)
	}
	// The catalog judges its table as a fault's, at on:.
	cat := &Catalog{}
	cat.tables[ConsumerSide] = []table{{schema: "public", name: "inbox", visible: true}}
	k := checker{s: s, c: cat}
	if got := k.readyTables(); len(got) != 0 {
		t.Errorf("ready tables: %v", got)
	}
	cat.tables[ConsumerSide][0].name = "inbox_v2"
	if got := k.readyTables(); len(got) != 1 || !strings.Contains(got[0].Error(), `f.yaml:6:40: services: consumer: ready: on: consumer_db.commit(table=inbox): no table "inbox" in the consumer database after its schema (did you mean "inbox_v2"?)`) {
		t.Errorf("ready tables: %v", got)
	}
}
