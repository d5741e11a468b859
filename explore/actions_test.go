package explore

import (
	"strings"
	"testing"
)

// Duplicate and drop are tried only where the run's broker's proxy takes
// them; the other actions are left as they were.
func TestPruneInapplicableKeepsWhereTheProxyApplies(t *testing.T) {
	cases := []struct {
		on, do, broker, pruned string // pruned: a word of the reason, "" for kept
	}{
		{"broker.reply(XADD)", "duplicate", "redis", ""},
		{"broker.request(publish)", "duplicate", "redis", ""},
		{"broker.reply(XREADGROUP)", "duplicate", "redis", ""},
		{"broker.reply(XACK)", "drop", "redis", ""},
		{"broker.request(XREADGROUP)", "duplicate", "redis", "reply(XREADGROUP)"},
		{"broker.request(XACK)", "drop", "redis", "drop loses a reply"},
		{"broker.reply(XACK)", "duplicate", "redis", "not to XACK"},
		{"consumer_db.commit(table=inbox)", "drop", "redis", "database boundary"},
		{"broker.reply(publish)", "duplicate", "kafka", ""},
		{"broker.reply(deliver)", "duplicate", "kafka", "Produce) only"},
		{"broker.reply(ack)", "drop", "kafka", ""},
		{"broker.reply(deliver)", "drop", "nats", ""},
		{"broker.request(publish)", "duplicate", "nats", ""},
		{"broker.request(ack)", "duplicate", "nats", "not to request(ack)"},
		{"broker.reply(publish)", "drop", "rabbitmq", ""},
		{"broker.reply(publish)", "duplicate", "rabbitmq", "request(publish)"},
		{"broker.reply(publish)", "kill", "kafka", ""},
		{"consumer_db.commit(table=inbox)", "kill", "redis", ""},
	}
	for _, c := range cases {
		p := &Point{On: on(c.on), Do: c.do}
		PruneInapplicable([]*Point{p}, c.broker)
		if c.pruned == "" && p.Pruned != "" || c.pruned != "" && !strings.Contains(p.Pruned, c.pruned) {
			t.Errorf("%s do=%s on %s: pruned %q, want %q", c.on, c.do, c.broker, p.Pruned, c.pruned)
		}
	}
}

// A random schedule's action that does not apply turns to the next one
// of the list that does.
func TestApplicableTurnsToTheNextAction(t *testing.T) {
	acts := []string{"kill", "drop", "duplicate"}
	if do, ok := applicable(on("consumer_db.commit(table=inbox)"), "drop", acts, "redis"); !ok || do != "kill" {
		t.Errorf("got %q %v, want kill", do, ok)
	}
	if do, ok := applicable(on("broker.reply(XADD)"), "drop", acts, "redis"); !ok || do != "drop" {
		t.Errorf("got %q %v, want drop", do, ok)
	}
	if _, ok := applicable(on("consumer_db.commit(table=inbox)"), "drop", []string{"drop", "duplicate"}, "redis"); ok {
		t.Error("a commit took drop or duplicate")
	}
}
