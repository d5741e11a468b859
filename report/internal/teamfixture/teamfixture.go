// Package teamfixture makes the result of a failing drill of a team's
// system as the runner fills it in (its wire history, its settle window,
// the violation with its witness), for the tests of what draws it: the
// timeline, the Mermaid diagram and the HTML report.
package teamfixture

import (
	"github.com/outboxdrill/runner/proxy/fault"
	"testing"
	"time"

	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/steps"
)

// The fixture's faults, as the proxies name them (a Trigger's String).
var (
	relayKill   = fault.Trigger{Link: fault.Broker, Boundary: fault.Reply, Filter: fault.Filter{Command: "XADD"}, Nth: 1, Action: fault.Action{Do: fault.Kill}}
	commitError = fault.Trigger{Link: fault.ConsumerDB, Boundary: fault.Commit, Filter: fault.Filter{Table: "inbox"}, Nth: 1, Action: fault.Action{Do: fault.Error}}
	RelayKill   = relayKill.String()
	CommitError = commitError.String()
)

// Result is the drill: a relay killed with its XADD reply held, a second
// relay that publishes again and marks the row, a consumer that polls
// idly, then acks its first delivery before its COMMIT, which the fault
// fails, then applies the second; then the settle window. The checker
// found acked_without_effect on the first delivery (and its ack). evil
// goes into what a team's system controls: the event id, a service's
// name and its output (with secret, a password the run knows).
func Result(t testing.TB, evil, secret string) *report.Result {
	t.Helper()
	sc := scenariotest.ParseOne(t, "name: team\nsteps:\n  - produce(event=bus-1)\n")
	sc.Name = "team drill " + evil
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev, relay := "bus-1"+evil, "relay"+evil
	r := &report.Result{Scenario: sc, Broker: "redis",
		Steps: []report.StepRecord{{Call: sc.Steps[0], At: t0, Duration: 5 * time.Millisecond,
			Result: steps.Result{Details: []string{"committed " + ev + ": 100 USD alice → bob"}, Entries: []steps.Entry{{EventID: ev, Outcome: "committed"}}}}},
		Failures:    []steps.Failure{{Pos: sc.Pos, Key: "history", Msg: "acked_without_effect: …"}},
		SettleStart: at(600), SettleEnd: at(900), Settled: "settled in 300ms",
		Services: []report.ServiceOutput{{Service: relay, Start: "t.yaml:5:5", PID: 41, Ended: "killed by the fault",
			Output: "connecting to redis://app:" + secret + "@127.0.0.1:6379/ " + evil + "\n"}},
	}
	r.Wire = &report.Wire{Processes: []report.Process{
		{N: 1, Service: relay, Start: "t.yaml:5:5", PID: 41, Fault: relayKill.On() + " do=kill", Ended: "killed by the fault"},
		{N: 2, Service: relay, Start: "t.yaml:7:5", PID: 42, Ended: "still running when the scenario ended"},
		{N: 3, Service: "consumer", Start: "t.yaml:9:5", PID: 43, Fault: commitError.On() + " do=error", Ended: "still running when the scenario ended"},
	}}
	pub := func(ms, p int, id, fault string) report.WireOp {
		return report.WireOp{At: at(ms), Process: p, Link: "broker", Op: "XADD", Class: report.ClassPublish, Reply: "ok", Fault: fault,
			Events: []report.WireEvent{{EventID: ev, EntryID: id, Dest: "s"}}}
	}
	poll := func(ms int) report.WireOp {
		return report.WireOp{At: at(ms), Process: 3, Link: "broker", Op: "XREADGROUP", Reply: "empty"}
	}
	deliver := func(ms int, id string, class string) report.WireOp {
		return report.WireOp{At: at(ms), Process: 3, Link: "broker", Op: map[string]string{report.ClassDeliver: "XREADGROUP", report.ClassAck: "XACK"}[class],
			Class: class, Reply: "entries", Events: []report.WireEvent{{EventID: ev, EntryID: id, Group: "accounting"}}}
	}
	r.Wire.Ops = []report.WireOp{
		pub(100, 1, "1-0", RelayKill), pub(200, 2, "2-0", ""),
		{At: at(210), Process: 2, Link: "producer_db", Op: "COMMIT", Class: report.ClassCommit},
		poll(300), poll(310), poll(320),
		deliver(400, "1-0", report.ClassDeliver), deliver(410, "1-0", report.ClassAck),
		{At: at(420), Process: 3, Link: "consumer_db", Op: "COMMIT", Class: report.ClassCommit, Tables: []string{"inbox", "projection"}, Fault: CommitError},
		deliver(500, "2-0", report.ClassDeliver), deliver(505, "2-0", report.ClassAck),
		{At: at(510), Process: 3, Link: "consumer_db", Op: "COMMIT", Class: report.ClassCommit, Tables: []string{"inbox", "projection"}},
		poll(700),
	}
	r.Violations = []history.Violation{{Invariant: "acked_without_effect", Consumer: "accounting", EventID: ev,
		Detail: "entry 1-0 was acked (outcome delivered) but the inbox holds no row for the event",
		Witness: []history.Op{{Step: "system.yaml (service consumer, start 3, via its broker proxy) XREADGROUP", StepN: 1<<20 + 3<<10,
			Kind: history.Delivered, EventID: ev, EntryID: "1-0", Consumer: "accounting", Acked: true}}}}
	return r
}
