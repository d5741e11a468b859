package scaffold

import (
	"github.com/outboxdrill/runner/broker/kinds"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/system"
)

func TestInitParseCommand(t *testing.T) {
	c, err := ParseCommand(`DATABASE_URL=${producer_db.url} GROUP="${consumer}" NAME='a b' node "my relay.js" --flag=1 x\ y`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"node", "my relay.js", "--flag=1", "x y"}; !reflect.DeepEqual(c.Argv, want) {
		t.Errorf("argv %q, want %q", c.Argv, want)
	}
	if want := map[string]string{"DATABASE_URL": "${producer_db.url}", "GROUP": "${consumer}", "NAME": "a b"}; !reflect.DeepEqual(c.Env, want) {
		t.Errorf("env %q, want %q", c.Env, want)
	}
	for line, want := range map[string]string{"A=1": "no command after its environment", `node "x`: `unterminated " quote`} {
		if _, err := ParseCommand(line); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", line, err, want)
		}
	}
}

// A path given relative to where init runs is made relative to the out
// dir (absolute when they share no top directory); a program found on
// PATH, a flag and a placeholder are left alone.
func TestInitRelocated(t *testing.T) {
	c := Command{Argv: []string{"./scaffold_test.go", "relay", "-u", "${runner}", "scaffold_test.go"}}
	out := filepath.Join(t.TempDir(), "out")
	got, notes := c.Relocated(mustAbs(t, "."), out)
	// The checkout and the temp dir may share a top directory (a clone
	// under /tmp) or not: the path is relative to out, or absolute.
	file := relative(out, mustAbs(t, "scaffold_test.go"))
	want := []string{file, "relay", "-u", "${runner}", file}
	if !reflect.DeepEqual(got.Argv, want) || len(notes) != 2 {
		t.Errorf("relocated %q (notes %q), want %q", got.Argv, notes, want)
	}
	if rel := relative("/work/repo/out", "/work/repo/svc/relay.py"); rel != "../svc/relay.py" {
		t.Errorf("within one tree: %q", rel)
	}
	got, _ = Command{Argv: []string{"run.sh"}}.Relocated("/work/repo/svc", "/work/repo/svc/init")
	if got.Argv[0] != "run.sh" {
		t.Errorf("a program without a slash is PATH's: %q", got.Argv[0])
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// catalog is a producer with two outbox-shaped tables and a consumer with
// an inbox and a read model, as the catalog would describe them.
func catalog() (producer, consumer *Catalog) {
	outbox := &Table{Schema: "public", Name: "pending_events", Visible: true, Primary: []string{"id"}, Uniques: [][]string{{"id"}, {"event_uuid"}},
		Columns: []*Column{{Name: "id", Type: "bigint", NotNull: true, Default: true}, {Name: "event_uuid", Type: "uuid", NotNull: true},
			{Name: "body", Type: "jsonb", NotNull: true}, {Name: "kind", Type: "text", NotNull: true}, {Name: "shipped_at", Type: "timestamp with time zone"}}}
	other := &Table{Schema: "public", Name: "audit_outbox", Visible: true, Uniques: [][]string{{"key"}},
		Columns: []*Column{{Name: "key", Type: "text", NotNull: true}, {Name: "data", Type: "json", NotNull: true}, {Name: "sent", Type: "boolean", NotNull: true, Default: true}}}
	inbox := &Table{Schema: "public", Name: "handled", Visible: true, Uniques: [][]string{{"handler", "event_uuid"}},
		Columns: []*Column{{Name: "handler", Type: "text", NotNull: true}, {Name: "event_uuid", Type: "uuid", NotNull: true}, {Name: "payload", Type: "jsonb", NotNull: true}}}
	model := &Table{Schema: "public", Name: "totals", Visible: true,
		Columns: []*Column{{Name: "handler", Type: "text"}, {Name: "ccy", Type: "text"}, {Name: "total_minor", Type: "bigint"}, {Name: "events", Type: "bigint"}}}
	return &Catalog{Tables: []*Table{other, outbox}}, &Catalog{Tables: []*Table{inbox, model}}
}

// The catalog's candidates: both outbox-shaped tables (the one named like
// an outbox first), the event id column without a default over the
// serial, the marker by its name; the inbox by its unique index; the read
// model by its columns; the probe's INSERT from the NOT NULL columns.
func TestInitCandidates(t *testing.T) {
	p, c := catalog()
	outs := Outboxes(p)
	if len(outs) != 2 || outs[0].Table.Name != "audit_outbox" || outs[1].Table.Name != "pending_events" {
		t.Fatalf("outboxes: %v", outs)
	}
	o := outs[1]
	if o.EventIDs[0].Name != "event_uuid" || o.Payloads[0].Name != "body" || o.Markers[0].Unpublished != "shipped_at IS NULL" {
		t.Errorf("pending_events: id %s, payload %s, marker %s", o.EventIDs[0].Name, o.Payloads[0].Name, o.Markers[0].Unpublished)
	}
	if outs[0].Markers[0].Unpublished != "NOT sent" {
		t.Errorf("audit_outbox's marker: %s", outs[0].Markers[0].Unpublished)
	}
	ins := Inboxes(c)
	if len(ins) != 1 || ins[0].Consumer.Name != "handler" || ins[0].EventID.Name != "event_uuid" || ins[0].Payload.Name != "payload" {
		t.Fatalf("inboxes: %+v", ins)
	}
	ms := ReadModels(c, ins)
	if len(ms) != 1 || ms[0].complete() != 4 || ms[0].Amount.Name != "total_minor" || ms[0].Currency.Name != "ccy" {
		t.Errorf("read models: %+v", ms)
	}
	prod, err := BuildProduce(o.Table, o.EventIDs[0], o.Payloads[0])
	if err != nil || prod.SQL != "INSERT INTO pending_events (event_uuid, body, kind) VALUES (${event}, ${payload}::jsonb, 'kind')" || len(prod.Literals) != 1 {
		t.Errorf("produce: %q %q %v", prod.SQL, prod.Literals, err)
	}
	o.Table.Columns = append(o.Table.Columns, &Column{Name: "where", Type: "point", NotNull: true})
	if _, err := BuildProduce(o.Table, o.EventIDs[0], o.Payloads[0]); err == nil || !strings.Contains(err.Error(), "pending_events.where is NOT NULL without a default and of type point") {
		t.Errorf("a column init has no value for: %v", err)
	}
}

// A marker is read from the probe row's values before and after the relay.
func TestInitMarker(t *testing.T) {
	for _, tc := range []struct {
		col           Column
		before, after any
		want          string
	}{
		{Column{Name: "sent_at", Type: "timestamp with time zone"}, nil, "2024-01-01", "sent_at IS NULL"},
		{Column{Name: "published", Type: "boolean"}, false, true, "NOT published"},
		{Column{Name: "pending", Type: "boolean"}, true, false, "pending"},
		{Column{Name: "status", Type: "text"}, "NEW", "SENT", "status = 'NEW'"},
		{Column{Name: "order", Type: "text"}, "it's", "x", `"order" = 'it''s'`},
		{Column{Name: "updated_at", Type: "timestamp without time zone"}, "2024-01-01", "2024-01-02", ""},
	} {
		m, ok := markerOf(&tc.col, tc.before, tc.after)
		if m.Unpublished != tc.want || ok != (tc.want != "") {
			t.Errorf("%s %v → %v: %q %v, want %q", tc.col.Name, tc.before, tc.after, m.Unpublished, ok, tc.want)
		}
	}
}

// What init renders loads as a system file: the values quoted as YAML
// needs, the alternatives and evidence as comments, the keys in order.
func TestInitRenderLoads(t *testing.T) {
	p := &Plan{Broker: "redis", Header: []string{"a header", "note: with\na newline"}}
	p.Services = []*ServicePlan{
		{Name: "relay", Cmd: Command{Argv: []string{"python3", "-u", "relay.py", "yes", "1"}, Env: map[string]string{"URL": "${producer_db.url}", "NAME": "a: b"}}, Ready: "ready", Comments: []string{"seen: x"}},
		{Name: "consumer", Cmd: Command{Argv: []string{"./c"}, Env: map[string]string{"DB": "${consumer_db.url}"}}},
	}
	p.set(&Key{Name: "produce", Value: yq("INSERT INTO o (id, p) VALUES (${event}, ${payload}::jsonb)")})
	p.set(&Key{Name: "brokers", Value: "[redis]"})
	p.set(&Key{Name: "outbox", Value: flow("table", "o", "event_id", "id", "payload", "p", "unpublished", "NOT sent"), Comments: []string{"seen: it"}, Alternatives: []string{"{table: x}"}})
	p.set(&Key{Name: "stream", Value: flow("event_id", "id", "payload", "p")})
	p.set(&Key{Name: "inbox", Value: flow("table", "i", "consumer", "c", "event_id", "id", "payload", "p")})
	p.order()
	text := string(p.Render())
	s, errs := system.Parse("/tmp/system.yaml", []byte(text), kinds.All())
	if len(errs) > 0 {
		t.Fatalf("%v\n%s", errs, text)
	}
	if got := s.Services["relay"].Run; !reflect.DeepEqual(got, []string{"python3", "-u", "relay.py", "yes", "1"}) || s.Services["relay"].Env["NAME"] != "a: b" || s.Outbox.Unpublished != "NOT sent" {
		t.Errorf("read back: run %q, env %q, unpublished %q\n%s", got, s.Services["relay"].Env, s.Outbox.Unpublished, text)
	}
	if !strings.Contains(text, "# note: with\n# a newline\n") || !strings.Contains(text, "# or: outbox: {table: x}\n") || strings.Index(text, "outbox:") > strings.Index(text, "brokers:") {
		t.Errorf("comments or order:\n%s", text)
	}
}

// A docker-compose service's command and environment: its server URLs
// the proxies' placeholders (a password never shown), the names it knows
// the scenario's, its paths from its build context; what init cannot
// read is an error naming what to give instead.
func TestInitFromCompose(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "docker-compose.yml")
	writeFile(t, file, `services:
  relay:
    build: {context: svc}
    entrypoint: [python3, "-u"]
    command: relay.py --fast
    environment: {DATABASE_URL: "postgres://app:s3cret@db:5432/orders", REDIS_URL: "redis://redis:6379/0", STREAM: payments, LOG: debug}
  consumer:
    command: ["node", "c.js"]
    environment: [DATABASE_URL=postgres://db/ledger, GROUP=ledger, TOPIC=payments]
  bare: {image: x}
  interp: {command: x, environment: {URL: "${DB_URL}"}}
`)
	c, err := FromCompose(t.Context(), file, "relay", "relay", "redis")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"python3", "-u", "relay.py", "--fast"}; !reflect.DeepEqual(c.Argv, want) || c.Dir != filepath.Join(dir, "svc") {
		t.Errorf("argv %q in %s", c.Argv, c.Dir)
	}
	if want := map[string]string{"DATABASE_URL": "${producer_db.url}", "REDIS_URL": "${broker.url}", "STREAM": "${stream}", "LOG": "debug"}; !reflect.DeepEqual(c.Env, want) {
		t.Errorf("env %q", c.Env)
	}
	if all := strings.Join(c.Comments, "\n"); strings.Contains(all, "s3cret") || !strings.Contains(all, "env DATABASE_URL: postgres://app:***@db:5432/orders in docker-compose.yml → ${producer_db.url}") || len(c.Comments) != 3 {
		t.Errorf("comments:\n%s", all)
	}
	c, err = FromCompose(t.Context(), file, "consumer", "consumer", "kafka")
	if want := map[string]string{"DATABASE_URL": "${consumer_db.url}", "GROUP": "${group}", "TOPIC": "${topic}"}; err != nil || !reflect.DeepEqual(c.Env, want) {
		t.Errorf("consumer on kafka: env %q, %v", c.Env, err)
	}
	for name, want := range map[string]string{
		"bare":   `service bare has no command: (its image's own is not known here): give its command line with --relay`,
		"interp": `environment URL: ${DB_URL} is compose's interpolation, which init does not resolve`,
		"relya":  `no service "relya"; services: bare, consumer, interp, relay`,
	} {
		if _, err := FromCompose(t.Context(), file, name, "relay", "redis"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
