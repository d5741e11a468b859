package main

import (
	"strings"
	"testing"
)

// unordered is the reference pipeline's anti-pattern: version 2 of acct-7
// overtakes version 1 on the broker, and a consumer without ordering
// applies it first. {ordering} is the consume steps' ordering.
const unordered = `name: "a consumer {ordering} applies what arrives first"
{declared}
steps:
  - produce: {event: open, aggregate: acct-7, amount: 100}
  - produce: {event: deposit, aggregate: acct-7, amount: 40}
  - publish: {event: deposit}
  - consume: {ordering: {ordering}}
  - relay
  - consume: {ordering: {ordering}}
  - claim: {idle: 0, ordering: {ordering}, worker: worker-1}
`

func unorderedScenario(t *testing.T, ordering, declared string) string {
	src := strings.NewReplacer("{ordering}", ordering, "{declared}", declared).Replace(unordered)
	return scenarioFile(t, ordering+".yaml", src)
}

// On the reference pipeline the inbox's received_at gives the apply order:
// a consumer without ordering fails naming out_of_order with the aggregate
// and the versions in apply order; declared, it passes; a strict consumer,
// which holds version 2 back, passes undeclared.
func TestReferenceOrderJudged(t *testing.T) {
	t.Parallel()
	code, out, errOut := cli(t, "run", "--broker", "redis", unorderedScenario(t, "none", ""))
	want := "out_of_order: consumer accounting, event open: aggregate acct-7: applied in the order version 2 (deposit), version 1 (open): version 2 (deposit) before version 1 (open)"
	if code != exitFailed || !strings.Contains(out, want) {
		t.Errorf("no ordering: exit %d, want 1 with\n%s\ngot:\n%s\n%s", code, want, out, errOut)
	}
	if code, out, errOut := cli(t, "run", "--broker", "redis", unorderedScenario(t, "none", "expect_violations: [out_of_order]")); code != exitOK {
		t.Errorf("no ordering, declared: exit %d, want 0\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = cli(t, "run", "-v", "--broker", "redis", unorderedScenario(t, "strict", ""))
	if code != exitOK || !strings.Contains(out, "gap, lost, out_of_order,") {
		t.Errorf("strict ordering: exit %d, want 0 with gap and out_of_order judged\n%s\n%s", code, out, errOut)
	}
	// No event of an aggregate: nothing to order, so neither is shown held.
	plain := scenarioFile(t, "plain.yaml", "name: no aggregate\nsteps:\n  - produce\n  - relay\n  - consume\n")
	code, out, errOut = cli(t, "run", "--broker", "redis", plain)
	if want := "history: not judged: gap, out_of_order: no committed event of the run belongs to an aggregate"; code != exitOK || !strings.Contains(out, want) {
		t.Errorf("no aggregate: exit %d, want 0 with %q\n%s\n%s", code, want, out, errOut)
	}
	if code, out, _ = cli(t, "run", "-v", "--broker", "redis", plain); strings.Contains(out, "gap, lost") || strings.Contains(out, "out_of_order, phantom") {
		t.Errorf("no aggregate: gap or out_of_order shown judged:\n%s", out)
	}
}

// On a team's system produce gives each event of an aggregate the next
// version, bound as ${aggregate} and ${version} (a rolled-back produce
// takes none); where the system file maps the aggregate and the version
// (here: the template's "${aggregate}" and "${version}" fields) but no
// inbox.applied_order, gap is judged and out_of_order is never judged,
// naming the key to map; where it maps neither, neither is judged.
func TestTeamOrderMappingAndVersions(t *testing.T) {
	t.Parallel()
	const scenario = `name: versions on a team's system
steps:
  - produce: {aggregate: a1}
  - produce: {aggregate: a1, fail: divzero}
  - produce: {aggregate: a1}
  - produce: {aggregate: a2}
  - expect:
      sql: {db: producer, query: "SELECT body->>'acct' AS acct, body->>'v' AS v FROM payment_outbox ORDER BY id", want: [{acct: a1, v: "1"}, {acct: a1, v: "2"}, {acct: a2, v: "1"}]}
`
	ordered := teamSystem(t, `currency: "${currency}"}}`, `currency: "${currency}"}, acct: "${aggregate}", v: "${version}"}`)
	code, out, errOut := cli(t, "run", "-v", "--system", ordered, scenarioFile(t, "versions.yaml", scenario))
	if code != exitOK || !strings.Contains(out, "never judged on this kind of run: out_of_order: the system file maps no inbox.applied_order") ||
		strings.Contains(out, "never judged on this kind of run: gap") {
		t.Errorf("aggregate and version mapped, no applied_order: exit %d, want 0, out_of_order never judged, gap judged\n%s\n%s", code, out, errOut)
	}
	// Mapped, but no produce names an aggregate: gap is not judged, naming
	// where the aggregate and the version were looked for.
	code, out, errOut = cli(t, "run", "--system", ordered, scenarioFile(t, "noagg.yaml", "name: no aggregate\nsteps:\n  - produce\n"))
	if want := "history: not judged: gap: no committed event of the run carries an aggregate at event.aggregate (acct) and a whole-number version at event.version (v)"; code != exitOK || !strings.Contains(out, want) {
		t.Errorf("mapped, no aggregate produced: exit %d, want 0 with %q\n%s\n%s", code, want, out, errOut)
	}
	code, out, errOut = cli(t, "run", "-v", "--system", teamSystem(t), scenarioFile(t, "plain.yaml", "name: plain\nsteps:\n  - produce: {aggregate: a1}\n"))
	if code != exitOK || !strings.Contains(out, "never judged on this kind of run: gap: the system file maps no event.aggregate and event.version") {
		t.Errorf("nothing mapped: exit %d, want 0 with gap never judged, naming event.aggregate\n%s\n%s", code, out, errOut)
	}
}
