package runner

import (
	"slices"
	"strings"
	"testing"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
)

// shareProbes are drills on a Kafka share group where the broker, not the
// worker, decides a record's end, each with the verdict the history must
// reach from the broker's own state.
var shareProbes = []struct{ name, steps, lost string }{
	{"archived at the delivery limit", `
  - consume: {fail: divzero}
  - consume: {fail: divzero}
  - consume: {fail: divzero}
  - consume: {fail: divzero}
  - consume: {fail: divzero}
    expect: {failed: 1}          # the 5th release reaches group.share.delivery.count.limit: archived
  - claim: {idle: 0}
    expect: {delivered: 0}       # the broker never hands it out again
`, "bus-1"},
	{"accepted by the next poll", `
  - produce: {event: bus-2, amount: 50}
  - relay
  - consume: {count: 1, fail: divzero, nack: false}
    expect: {failed: 1}          # kept by the worker: neither accepted nor released
  - consume:
    expect: {applied: 1}         # bus-2; this poll accepted bus-1 on the worker's behalf
  - claim: {idle: 0}
    expect: {delivered: 0}
`, "bus-1"},
	{"released under the limit", `
  - consume: {fail: divzero}
    expect: {failed: 1}          # released once: the broker hands it out again
`, ""},
}

// TestKafkaShareGroupLostComesFromTheBroker runs the probes with no
// expect_violations: a probe whose record the broker finished must fail on
// lost (and nothing else) with the share-partition start offset as the
// reason; one whose record the broker still holds must pass, lost judged.
func TestKafkaShareGroupLostComesFromTheBroker(t *testing.T) {
	t.Parallel()
	var scs []*scenario.Scenario
	for _, p := range shareProbes {
		scs = append(scs, scenariotest.ParseOne(t, "name: "+p.name+"\nkafka: {share: true}\nsteps:\n  - produce: {event: bus-1, amount: 100}\n  - relay"+p.steps))
	}
	params := testParams(t)
	params.Brokers = []string{broker.Kafka}
	params.URLs[broker.Kafka] = testservers.URL(t, broker.Kafka)
	_, res := runAll(t, params, scs)
	for _, p := range shareProbes {
		r := res[p.name]
		if _, no := r.NotJudged["lost"]; no || !slices.Contains(r.Judged(), "lost") {
			t.Errorf("%s: lost not judged (%v)", p.name, r.NotJudged)
		}
		if p.lost == "" {
			if !r.Passed() {
				t.Errorf("%s: want a pass, got:\n%s", p.name, report.FormatResult(r, false))
			}
			continue
		}
		var keys []string
		for _, f := range r.Failures {
			keys = append(keys, f.Key)
		}
		if len(r.Failures) != 1 || r.Failures[0].Key != "history" || !strings.HasPrefix(r.Failures[0].Msg, "lost: consumer accounting, event "+p.lost+": ") ||
			!strings.Contains(r.Failures[0].Msg, "below the share-partition start offset") {
			t.Errorf("%s: want one history failure, lost %s below the share-partition start offset; got %v:\n%s", p.name, p.lost, keys, report.FormatResult(r, false))
		}
	}
}
