package judge

import (
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/state"
	"github.com/outboxdrill/runner/sysrun"
)

// Who owes the run what: a consumer's groups as its proxy saw them, else
// the run's consumer id (a broker whose wire does not say, or a consumer
// that has not read yet); a service that only uses the producer's
// database owes publishes, not applications.
func TestConsumersOfAndProducersOf(t *testing.T) {
	live := []sysrun.Live{
		{Name: "relay", Producer: true, Proxied: true},
		{Name: "redis-consumer", Consumer: true, Groups: []string{"accounting", "audit"}},
		{Name: "kafka-consumer", Consumer: true},
		{Name: "tool"}, // uses neither side
	}
	got := consumersOf(live, "accounting", nil)
	if !slices.Equal(got["accounting"], []string{"redis-consumer", "kafka-consumer"}) || !slices.Equal(got["audit"], []string{"redis-consumer"}) || len(got) != 2 {
		t.Errorf("consumersOf: %v", got)
	}
	// Where the wire tells whom a service was handed deliveries as (a
	// Kafka group, a JetStream durable), that consumer id owes, not the
	// run's.
	got = consumersOf(live, "accounting", map[string][]string{"kafka-consumer": {"audit"}})
	if !slices.Equal(got["accounting"], []string{"redis-consumer"}) || !slices.Equal(got["audit"], []string{"redis-consumer", "kafka-consumer"}) {
		t.Errorf("consumersOf with the wire's groups: %v", got)
	}
	if names, proxied := producersOf(live); !slices.Equal(names, []string{"relay"}) || !proxied {
		t.Errorf("producersOf: %v %v", names, proxied)
	}
}

// An event counts as applied by its id, or by a row carrying its payload
// (a consumer keyed by another identity); anything else is still owed.
func TestAppliedBy(t *testing.T) {
	const pay = `{"amount": 100, "currency": "USD", "event_id": "e1"}`
	row := state.OutboxRow{EventID: "e1", Payload: pay, Published: true}
	for _, c := range []struct {
		inbox map[string]string
		want  bool
	}{
		{map[string]string{"e1": pay}, true},
		{map[string]string{"1-0": `{"event_id":"e1","amount":100,"currency":"USD"}`}, true},
		{map[string]string{"e2": `{"event_id":"e2","amount":100,"currency":"USD"}`}, false},
		{nil, false},
	} {
		if got := appliedBy(c.inbox, row); got != c.want {
			t.Errorf("appliedBy(%v) = %v, want %v", c.inbox, got, c.want)
		}
	}
}

// A row marked published whose publish no proxy saw is owed while the
// relay runs: its client may still hold it (a producer's linger).
func TestUnflushed(t *testing.T) {
	outbox := []state.OutboxRow{{EventID: "e1", Published: true}, {EventID: "e2", Published: true}, {EventID: "e3"}}
	ops := []history.Op{{Kind: history.Publish, EventID: "e1"}, {Kind: history.Delivered, EventID: "e2"}}
	got := unflushed(outbox, ops, []string{"relay"})
	if len(got) != 1 || !strings.Contains(got[0], "1 event(s) marked published whose publish no broker proxy saw yet (e2) while service relay") {
		t.Errorf("unflushed: %q", got)
	}
	ops = append(ops, history.Op{Kind: history.Publish, EventID: "e2"})
	if got := unflushed(outbox, ops, []string{"relay"}); len(got) != 0 {
		t.Errorf("everything on the wire, still owed: %q", got)
	}
}

// The witness quotes a process's last lines, cut, never its whole output.
func TestLastLines(t *testing.T) {
	if got := lastLines("a\n\nb\nc\nd\n", 3); got != `"b" | "c" | "d"` {
		t.Errorf("lastLines: %s", got)
	}
	if got := lastLines("", 3); got != "none" {
		t.Errorf("no output: %s", got)
	}
	if got := lastLines(strings.Repeat("x", 500), 1); len(got) > 210 || !strings.HasSuffix(got, `…"`) {
		t.Errorf("a long line is not cut: %d bytes", len(got))
	}
}
