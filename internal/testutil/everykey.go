package testutil

import (
	"fmt"
	"strings"
)

// Step is one step of the every-key scenario: its head line and its
// expectations, key and right value.
type Step struct {
	Head   string
	Expect [][2]string
}

// EveryKey exercises every outcome key of every step and every state check,
// each with its correct value.
var EveryKey = []Step{
	{"produce: {event: bus-1, amount: 100}", [][2]string{{"committed", "1"}, {"failed", "0"}}},
	{"produce: {event: bus-2, amount: 5, currency: EUR, fail: divzero}", [][2]string{{"committed", "0"}, {"failed", "1"}}},
	{"relay: {skip_mark: true}", [][2]string{{"published", "1"}, {"marked", "0"}}},
	{"relay:", [][2]string{{"published", "1"}, {"marked", "1"}}},
	{"consume: {count: 1}", [][2]string{{"delivered", "1"}, {"applied", "1"}, {"duplicate", "0"}, {"conflict", "0"}, {"failed", "0"}, {"acked", "1"}, {"deferred", "0"}, {"redelivered", "0"}}},
	{"consume: {fail: divzero}", [][2]string{{"delivered", "1"}, {"failed", "1"}, {"duplicate", "0"}, {"acked", "0"}}},
	{"claim: {idle: 0}", [][2]string{{"delivered", "1"}, {"applied", "0"}, {"duplicate", "1"}, {"conflict", "0"}, {"failed", "0"}, {"acked", "1"}, {"deferred", "0"}, {"redelivered", "1"}}},
	{"publish: {event: bus-1, amount: 7}", [][2]string{{"published", "1"}}},
	{"consume: {consumer: audit, skip_ack: true}", [][2]string{{"delivered", "3"}, {"applied", "1"}, {"duplicate", "1"}, {"conflict", "1"}, {"acked", "0"}}},
	{"expect:", [][2]string{
		{"stream.entries", "3"},
		{"stream.events", "1"},
		{"stream.pending", "{audit: 3}"},
		{"stream.lag", "{accounting: 1, audit: 3}"},
		{"outbox.rows", "1"},
		{"outbox.unpublished", "0"},
		{"journal.rows", "1"},
		{"ledger.rows", "2"},
		{"inbox.rows", "{accounting: 1, audit: 1}"},
		{"projection", "{accounting: {USD: {amount: 100, events: 1}}, audit: {USD: {amount: 100, events: 1}}}"},
		{"balances", "{alice: {USD: -100}, bob: {USD: 100}}"},
		{"metrics.unpublished", "0"},
		{"metrics.outbox_oldest_age", "0"},
		{"metrics.pel_oldest_idle", `"< 1m"`},
		{"metrics.redeliveries", "0"},
		{"metrics.inbox_conflicts", "1"},
		{"metrics.dlq", `"== 0"`},
		{"metrics.projection_lag", "0"},
		{"metrics.projection_watermark_age", "0"},
		{"ordering.gaps", "0"},
		{"sql", `{db: consumer, query: "SELECT consumer_id, event_id FROM inbox ORDER BY 1", want: [{consumer_id: accounting, event_id: bus-1}, {consumer_id: audit, event_id: bus-1}]}`},
	}},
	{"publish: {event: bus-1, amount: 8}", [][2]string{{"published", "1"}}},
	{"consume: {max_deliveries: 1}", [][2]string{{"delivered", "2"}, {"conflict", "2"}, {"dead_lettered", "2"}, {"acked", "2"}}},
	{"claim: {max_deliveries: 1, auto: true}", [][2]string{{"delivered", "0"}, {"dead_lettered", "0"}}},
	{"expect:", [][2]string{{"dlq.entries", "2"}}},
	{"replay_dlq:", [][2]string{{"replayed", "2"}}},
	{"inbox.purge: {consumer: audit}", [][2]string{{"purged", "1"}}},
	{"broker: {trim: 1}", [][2]string{{"trimmed", "5"}}},
	{"reconcile: {consumer: audit}", [][2]string{{"republished", "1"}}},
}

// RenderEveryKey writes the every-key scenario named name; mutate may
// change a value (to make it wrong).
func RenderEveryKey(name string, mutate func(step, key int, val string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %q\nsteps:\n", name)
	for si, s := range EveryKey {
		fmt.Fprintf(&b, "  - %s\n", s.Head)
		indent := "    expect:\n"
		if s.Head == "expect:" {
			indent = ""
		}
		b.WriteString(indent)
		for ki, kv := range s.Expect {
			fmt.Fprintf(&b, "      %s: %s\n", kv[0], mutate(si, ki, kv[1]))
		}
	}
	return b.String()
}
