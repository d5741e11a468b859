package scaffold

import (
	"fmt"
	"github.com/outboxdrill/runner/proxy/fault"
	"strings"
)

// Starter is one scenario file init writes.
type Starter struct {
	File string // its name in the out dir's scenarios/
	Text string
}

// FaultFree is the starter scenario init drills itself.
const FaultFree = "fault-free.yaml"

// Starters are the fault-free drill and the seed's three windows on the
// team's services, in words every broker's proxy takes (publish, not
// XADD), with the inbox table the probe found.
func Starters(p *Plan) []Starter {
	applied := "inbox.rows: 1"
	if p.Projection {
		applied += ", projection: {accounting: {USD: {amount: 100, events: 1}}}"
	}
	commit := fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: p.InboxTable}}.On()
	return []Starter{
		{FaultFree, scenarioText(p, "your relay and consumer, fault-free: the event is published once and applied once",
			"The first drill: nothing is faulted. It passes when the system file maps your services right.",
			"  - produce(event=bus-1)\n  - start: relay\n  - start: consumer\n  - expect: {outbox.unpublished: 0, "+applied+", within: 15s}\n")},
		{"seed-1-relay-killed-after-publish.yaml", scenarioText(p, "your relay is killed after its publish, before it marks the row: its restart publishes again, the consumer applies once",
			"Seed window 1: the proxy holds the broker's answer to the relay's publish and SIGKILLs the relay, so the broker has the event and the row is still unpublished. The next relay publishes it again; the consumer's inbox keeps one effect.",
			"  - produce(event=bus-1)\n  - start: {service: relay, fault: {on: \"broker.reply(publish)\", do: kill}}\n  - expect: {stream.events: 1, outbox.unpublished: 1, within: 10s}\n  - start: relay\n  - expect: {outbox.unpublished: 0, within: 10s}\n  - start: consumer\n  - expect: {"+applied+", within: 20s}\n")},
		{"seed-2-consumer-commit-fails.yaml", scenarioText(p, "your consumer's inbox COMMIT fails for real: the event comes again and is applied once",
			"Seed window 2: the proxy makes the server roll the consumer's transaction back and answers its COMMIT with an error. A correct consumer does not ack and applies the event when it comes again; one that acks first loses it (lost).",
			"  - produce(event=bus-1)\n  - start: relay\n  - expect: {outbox.unpublished: 0, within: 10s}\n  - start: {service: consumer, fault: {on: \""+commit+"\", do: error}}\n  - expect: {"+applied+", within: 20s}\n")},
		{"seed-3-consumer-killed-after-commit.yaml", scenarioText(p, "your consumer is killed after its inbox COMMIT, before its ack: the next one finds the event applied and applies it once",
			"Seed window 3: the server committed the inbox row, the proxy holds the reply and SIGKILLs the consumer before it acks. The next consumer is handed the event again and must see it in its inbox.",
			"  - produce(event=bus-1)\n  - start: relay\n  - start: {service: consumer, fault: {on: \""+commit+"\", do: kill}}\n  - expect: {inbox.rows: 1, within: 10s}\n  - start: consumer\n  - expect: {"+applied+", within: 20s}\n")},
	}
}

func scenarioText(p *Plan, name, description, steps string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\n", yq(name))
	fmt.Fprintf(&b, "description: >\n  %s\n  (Written by runner init.)\n", wrap(description))
	// Pinned: `runner run` without --broker runs it where init saw the
	// services run.
	fmt.Fprintf(&b, "tags: [init, system]\nsystem: ../system.yaml\nbroker: %s\n", p.Broker)
	b.WriteString("steps:\n" + steps)
	return b.String()
}

// wrap folds text at about 100 columns for a folded block.
func wrap(text string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+len(w) > 98 {
			lines, line = append(lines, line), ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n  ")
}
