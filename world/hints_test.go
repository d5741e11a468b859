package world

import (
	"cmp"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/state"
)

// --keep hints name the tool of the scenario's own broker, and only that one.
func TestKeepHintsPerBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testConfig(t)
	p.URLs[broker.NATS], p.URLs[broker.RabbitMQ] = testservers.URL(t, broker.NATS), testservers.URL(t, broker.RabbitMQ)
	sh := Shape{Brokers: []string{broker.Redis, broker.NATS, broker.RabbitMQ}}
	w, err := Open(ctx, &p, sh)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tools := map[string]string{broker.Redis: "redis-cli", broker.NATS: "nats --server", broker.RabbitMQ: "rabbitmqctl"}
	for b, tool := range tools {
		pair, err := w.TakePair(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		hints := strings.Join(w.Inspect(pair.iso, b, "accounting", "billing v2"), "\n")
		name := pair.Stream // as the broker names it
		if b == broker.NATS {
			name = natsStreamExists(t, p.URLs[broker.NATS], hints)
		}
		if !strings.Contains(hints, "psql") || !strings.Contains(hints, tool) || !strings.Contains(hints, name) {
			t.Errorf("%s: hints lack psql, %s or the stream %s:\n%s", b, tool, name, hints)
		}
		if strings.Contains(hints, "<consumer-id>") || b == broker.Redis && (!strings.Contains(hints, " accounting") || !strings.Contains(hints, " 'billing v2'")) {
			t.Errorf("%s: hints leave the consumer id to the reader, or miss one of the scenario's:\n%s", b, hints)
		}
		for other, otherTool := range tools {
			if other != b && strings.Contains(hints, otherTool) {
				t.Errorf("%s: hints name %s's tool %q:\n%s", b, other, otherTool, hints)
			}
		}
		if err := w.ReturnPair(ctx, pair); err != nil {
			t.Fatal(err)
		}
	}
}

// natsStreamExists is the stream (and its dead letters) the NATS hints name,
// checked on the server: a hint must name what the broker holds.
func natsStreamExists(t *testing.T, url, hints string) string {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for _, line := range strings.Split(hints, "\n") {
		_, name, ok := strings.Cut(line, " stream info ")
		if !ok {
			continue
		}
		if _, err := js.Stream(context.Background(), name); err != nil {
			t.Errorf("NATS hint names stream %q: %v\n%s", name, err, hints)
		}
		first = cmp.Or(first, name)
	}
	if first == "" {
		t.Fatalf("NATS hints name no stream:\n%s", hints)
	}
	return first
}

// TestPsqlHintForEveryServerForm: a Unix-socket server's hint was a URL
// whose path swallowed the socket directory (database
// "var/run/postgresql:5432/drill_…" does not exist).
func TestPsqlHintForEveryServerForm(t *testing.T) {
	for url, want := range map[string]string{
		"host=/var/run/postgresql user=postgres":       "psql 'host=/var/run/postgresql port=5432 user=postgres dbname=d'",
		"postgres://app:s3cr3t@127.0.0.1:5433/x":       "psql 'postgres://app@127.0.0.1:5433/d'",
		"postgres://app@[::1]:5432/x?sslmode=disable":  "psql 'postgres://app@[::1]:5432/d'",
		"postgresql:///x?host=/tmp&user=u&password=pw": "psql 'host=/tmp port=5432 user=u dbname=d'",
	} {
		if got := psqlHint(url, "d"); got != want {
			t.Errorf("%s:\n got %s\nwant %s", url, got, want)
		}
	}
}

// --keep's psql hints name the tables a team's system file maps, quoted
// for SQL and for the shell; the reference's stay as they were.
func TestKeepHintsNameTheTeamsTables(t *testing.T) {
	out, in, proj := tableHints(state.Reference)
	if got := out + in + proj; got != " -c 'TABLE outbox' -c 'TABLE inbox' -c 'TABLE projection'" {
		t.Errorf("the reference's hints: %s", got)
	}
	team := state.Map{Team: true, OutboxTable: "billing.Payment_Outbox", InboxTable: "order",
		Projection: "SELECT consumer_id, currency, amount, events FROM balances WHERE currency <> 'XTS'"}
	out, in, proj = tableHints(team)
	for _, c := range []struct{ arg, sql string }{
		{out, `TABLE "billing"."Payment_Outbox"`},
		{in, `TABLE "order"`},
		{proj, team.Projection},
	} {
		// What the shell hands psql: the -c word as the shell reads it.
		got, err := exec.Command("sh", "-c", `printf '%s' `+strings.TrimPrefix(c.arg, " -c ")).Output()
		if err != nil || string(got) != c.sql {
			t.Errorf("hint %s reads as %q (%v), want %q", c.arg, got, err, c.sql)
		}
	}
	if strings.Contains(out+in+proj, "TABLE outbox") || strings.Contains(out+in+proj, "TABLE inbox") {
		t.Errorf("a team's hints name the reference's tables: %s%s%s", out, in, proj)
	}
}
