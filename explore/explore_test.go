package explore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/system"
)

// on is a fault's place (on:) as a scenario writes it.
func on(text string) fault.Trigger {
	t, _ := fault.Parse(fault.Spec{On: text, Nth: 1, Do: "kill"}, nil)
	t.Nth, t.Action = 0, fault.Action{}
	return t
}

func loadSystem(t *testing.T) *system.System {
	t.Helper()
	sys, errs, err := system.Load(context.Background(), "../examples/go-payments/system.yaml", scenariotest.Kinds())
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	return sys
}

func defaultWorkload(t *testing.T, out string) *Workload {
	t.Helper()
	w, errs := Default(context.Background(), loadSystem(t), out, broker.Default())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return w
}

// crossings of the consumer as the proxies would report them: an idle
// claim, a read with entries, two units of work, then idle polls.
func consumerCrossings(w *Workload) []fault.Crossing {
	step := w.Starts[len(w.Starts)-1]
	at := time.Now()
	var xs []fault.Crossing
	add := func(c fault.Crossing) {
		at = at.Add(time.Millisecond)
		c.Service, c.Start, c.Process, c.At = "consumer", w.StartPos(step), 2, at
		xs = append(xs, c)
	}
	cmd := func(name, reply string) {
		add(fault.Crossing{Link: fault.Broker, Op: name, Reply: reply})
	}
	commit := func(tables ...string) {
		add(fault.Crossing{Link: fault.ConsumerDB, Boundary: fault.Commit, Tables: tables})
	}
	cmd("HELLO", "ok")
	cmd("XAUTOCLAIM", "empty")
	cmd("XREADGROUP", "entries")
	for range 3 {
		commit("account_balances", "processed_messages")
		cmd("XACK", "ok")
	}
	for range 4 {
		cmd("XAUTOCLAIM", "empty")
		cmd("XREADGROUP", "empty")
		commit() // a poll's transaction: wrote nothing
	}
	return xs
}

func TestEnumeratePrunesByBoundaryAndPrefix(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	ps := Enumerate(w, consumerCrossings(w), []string{"kill", "error"}, 3)
	run := map[string]bool{}
	pruned := map[string]string{}
	for _, p := range ps {
		if p.Pruned == "" {
			run[p.String()] = true
		} else {
			pruned[p.String()] = p.Pruned
		}
	}
	for _, want := range []string{
		"consumer broker.request(XAUTOCLAIM) nth=1 do=kill",                    // the one idle poll that stands for all
		"consumer broker.reply(XREADGROUP) nth=1 do=kill",                      // the read that carried work
		"consumer consumer_db.commit(table=processed_messages) nth=1 do=error", // the inbox table names the commit
		"consumer consumer_db.commit(table=processed_messages) nth=2 do=error", // a new prefix: after a commit
		"consumer broker.request(XACK) nth=2 do=kill",
	} {
		if !run[want] {
			t.Errorf("no point %s; points: %v", want, run)
		}
	}
	for want, why := range map[string]string{
		"consumer consumer_db.commit(table=processed_messages) nth=3 do=error": "duplicate of",
		"consumer broker.request(XAUTOCLAIM) nth=2 do=kill":                    "an idle poll",
		"consumer broker.request(XREADGROUP) nth=2 do=kill":                    "an idle poll",
		"consumer broker.reply(XACK) nth=1 do=error":                           "the same as request error",
	} {
		if !strings.HasPrefix(pruned[want], why) {
			t.Errorf("%s: pruned %q, want %q…", want, pruned[want], why)
		}
	}
	for p := range run {
		if strings.Contains(p, "HELLO") || strings.Contains(p, "table=)") {
			t.Errorf("a point at a connection's setup or a transaction that wrote nothing: %s", p)
		}
	}
}

func TestRenderedVariantLoadsWithItsFault(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	consumer := w.Starts[len(w.Starts)-1]
	v := Variant{Faults: []Fault{{Step: consumer, On: on("consumer_db.commit(table=processed_messages)"), Nth: 2, Do: "kill"}},
		Drop: map[int]bool{w.Events[0]: true}}
	file := filepath.Join(out, "x.yaml")
	body := w.Render(out, "rendered", "a comment\non two lines", v)
	scs, errs := scenario.Parse(file, body, scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatalf("%v\n%s", errs, body)
	}
	sc := scs[0]
	if sc.System == nil || sc.System.File != w.System.File {
		t.Errorf("system: %v, want %s\n%s", sc.System, w.System.File, body)
	}
	var starts, produces int
	for _, c := range sc.Steps {
		switch c.Def.Name {
		case "produce":
			produces++
		case "start":
			starts++
			p := c.Params.(*steps.StartParams)
			if !p.Restart {
				t.Errorf("%s: not supervised", c.Pos)
			}
			if p.Service == "consumer" && (p.Fault == nil || p.Fault.Nth != 2 || p.Fault.Do != "kill") {
				t.Errorf("%s: fault %+v, want nth 2 do kill", c.Pos, p.Fault)
			}
		}
	}
	if starts != 2 || produces != 2 || !strings.HasPrefix(string(body), "# a comment\n# on two lines\n") {
		t.Errorf("%d starts, %d produces, want 2 and 2 (one event left out), the comment first:\n%s", starts, produces, body)
	}
}

func TestRandomScheduleIsTheSeeds(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	cands := Candidates(w, consumerCrossings(w), []string{"kill"})
	if len(cands) == 0 {
		t.Fatal("no candidates")
	}
	for _, c := range cands {
		if strings.Contains(c.On.On(), "HELLO") {
			t.Errorf("a candidate at a connection's setup: %v", c)
		}
	}
	draw := func(seed uint64) string {
		long, errs := RandomWorkload(context.Background(), w.System, out, 300, seed)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return string(long.Render(out, "r", "", Variant{Faults: Schedule(long, cands, []string{"kill", "error"}, 0.1, seed)}))
	}
	a, b, c := draw(7), draw(7), draw(8)
	if a != b {
		t.Error("seed 7 drew two schedules")
	}
	if a == c {
		t.Error("seeds 7 and 8 drew one schedule")
	}
	if n := strings.Count(a, "- fault:"); n < 10 || n > 60 {
		t.Errorf("%d faults for 300 events at 0.1, want about 30", n)
	}
}

func TestClassifyNeverGuesses(t *testing.T) {
	fail := func(key, msg string) *report.Result {
		return &report.Result{Failures: []steps.Failure{{Key: key, Msg: msg}}}
	}
	for _, c := range []struct {
		res  *report.Result
		want Outcome
	}{
		{&report.Result{}, Held},
		{&report.Result{Violations: []history.Violation{{Invariant: "lost"}}, Failures: []steps.Failure{{Key: "history"}}}, Violated},
		{fail("outbox.unpublished", "want 0, got 1"), Violated},
		{fail("fault", "the fault broker.reply(XACK) nth=3 do=kill on consumer never fired"), NotReached},
		{fail("settle", "the system did not settle within 5s"), NotJudged},
		{fail("error", "step cancelled: scenario timed out after 1m"), NotJudged},
		{&report.Result{Skipped: "f.yaml:2:9: the fault x on consumer: cannot classify the boundary exactly: a COMMIT inside a multi-statement simple query"}, Unclassed},
		{nil, NotRun},
	} {
		if got := classify(c.res); got.Outcome != c.want {
			t.Errorf("%+v: %s, want %s", c.res, got.Outcome, c.want)
		}
	}
	v := Verdict{Outcome: Violated, Broken: []string{"double_published"}}.afterPipelinedError([]Fault{{On: on("broker.request(XADD)"), Do: "error"}})
	if v.Outcome != Held || v.Unjudged["double_published"] == "" {
		t.Errorf("double_published after an XADD error: %+v, want held and not judged", v)
	}
}

// On NATS, RabbitMQ and Kafka each boundary's trigger counts its own
// crossings (fault.Meet): a Kafka Fetch that handed out records after two
// idle polls is request(deliver) nth=3 but reply(deliver) nth=1; a NATS
// pull request is request(deliver)'s only, a delivery reply(deliver)'s
// only; an ack the broker answers nothing to (no reply subject) moves
// reply(ack)'s count but gets no reply point.
func TestEnumerateCountsEachBoundaryAsTheProxyDoes(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	step := w.Starts[len(w.Starts)-1]
	at := time.Now()
	var xs []fault.Crossing
	add := func(op, reply string, req, rep fault.Meet) {
		at = at.Add(time.Millisecond)
		xs = append(xs, fault.Crossing{Service: "consumer", Start: w.StartPos(step), Process: 2, At: at,
			Link: fault.Broker, Op: op, Reply: reply, Request: req, Response: rep})
	}
	add("deliver", "empty", fault.Strikes, fault.Passed)    // Kafka: an idle Fetch
	add("deliver", "empty", fault.Strikes, fault.Passed)    // another
	add("deliver", "entries", fault.Strikes, fault.Strikes) // a Fetch with records
	add("deliver", "", fault.Strikes, fault.Passed)         // NATS: a pull request
	add("deliver", "entries", fault.Passed, fault.Strikes)  // NATS: a delivery
	add("ack", "", fault.Strikes, fault.Counted)            // an ack without a reply subject
	add("ack", "ok", fault.Strikes, fault.Strikes)          // ackAck: answered
	ps := Enumerate(w, xs, []string{"kill", "error"}, 5)
	run := map[string]string{}
	for _, p := range ps {
		run[p.String()] = p.Pruned + "|" + p.Crossing
	}
	for want, crossing := range map[string]string{
		"consumer broker.request(deliver) nth=1 do=kill": "broker.request(deliver)→empty",
		"consumer broker.request(deliver) nth=3 do=kill": "broker.deliver→entries",
		"consumer broker.reply(deliver) nth=1 do=kill":   "broker.deliver→entries",
		"consumer broker.reply(deliver) nth=1 do=error":  "broker.deliver→entries", // keeps the delivery from the service: not a request error
		"consumer broker.request(deliver) nth=4 do=kill": "broker.request(deliver)",
		"consumer broker.reply(deliver) nth=2 do=kill":   "broker.reply(deliver)→entries",
		"consumer broker.request(ack) nth=1 do=kill":     "broker.request(ack)",
		"consumer broker.request(ack) nth=2 do=kill":     "broker.ack→ok",
		"consumer broker.reply(ack) nth=2 do=kill":       "broker.ack→ok",
	} {
		if got, ok := run[want]; !ok || got != "|"+crossing {
			t.Errorf("%s: %q, want run at %s; points: %v", want, got, crossing, run)
		}
	}
	for _, never := range []string{"consumer broker.reply(ack) nth=1 do=kill", "consumer broker.request(deliver) nth=5 do=kill", "consumer broker.reply(deliver) nth=3 do=kill"} {
		if _, ok := run[never]; ok {
			t.Errorf("a point the proxy would never strike: %s", never)
		}
	}
	if got := run["consumer broker.reply(ack) nth=2 do=error"]; !strings.HasPrefix(got, "the same as request error") {
		t.Errorf("reply(ack) error: %q, want pruned as a request error", got)
	}
}

// A written finding that broke nothing in its confirming runs is set
// aside (not a .yaml that `runner run DIR` would pass) and says so; one that
// broke again stays where it was written.
func TestAFindingThatNeverBrokeAgainIsSetAside(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	e := &explorer{p: Params{Out: out}}
	consumer := w.Starts[len(w.Starts)-1]
	f := &Finding{Broken: []string{"lost"}, Why: "lost: …", Minimal: Variant{Faults: []Fault{{Step: consumer, On: on("consumer_db.commit(table=processed_messages)"), Nth: 1, Do: "kill"}}}}
	if err := e.write(w, f); err != nil {
		t.Fatal(err)
	}
	written := f.File
	f.Reproduced, f.Tries = 1, 3
	if err := e.unconfirmed(w, f); err != nil || f.File != written {
		t.Fatalf("a flaky finding moved: %v, %s", err, f.File)
	}
	f.Reproduced = 0
	if err := e.unconfirmed(w, f); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(f.File)
	if err != nil || !strings.HasSuffix(f.File, ".yaml.unconfirmed") || !strings.Contains(string(body), "UNCONFIRMED: this schedule broke it once, then not in 3 runs") {
		t.Errorf("set aside as %s (%v):\n%s", f.File, err, body)
	}
	if _, err := os.Stat(written); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", written, err)
	}
	if got := f.Reproduces(); got != "did not break again in 3 runs: unconfirmed" {
		t.Errorf("Reproduces: %q", got)
	}
}

// A check that failed only because shrinking left events out (inbox.rows:
// 2 with one event) is left out of the written scenario: it would fail
// once the bug is fixed too. An expect step left with no check goes; the
// others stay. A failed check counts for a finding only where the history
// checker named nothing.
func TestShrunkEventsLeaveTheirStaleChecksOut(t *testing.T) {
	src := `name: two events
steps:
  - produce(event=a-1)
  - produce(event=a-2)
  - start: relay
  - expect: {outbox.unpublished: 0, within: 10s}
  - start: consumer
  - expect: {inbox.rows: 2, within: 10s}
  - relay(limit=1):
    expect: {published: 0, inbox.rows: 2, nats: {inbox.rows: 1}}
`
	w, errs := parseWorkload(context.Background(), "wl.yaml", []byte(src), loadSystem(t))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	out := t.TempDir()
	checks := func(v Variant) (keys []string) {
		body := w.Render(out, "r", "", v)
		scs, errs := scenario.Parse(filepath.Join(out, "r.yaml"), body, scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatalf("%v\n%s", errs, body)
		}
		for _, c := range scs[0].Steps {
			for _, ch := range c.Expect.Checks {
				keys = append(keys, ch.Check.Name)
			}
			for _, o := range c.Expect.Outcomes {
				keys = append(keys, o.Key)
			}
		}
		return keys
	}
	if got := checks(Variant{}); strings.Join(got, " ") != "outbox.unpublished inbox.rows inbox.rows inbox.rows published" {
		t.Errorf("the whole workload: checks %v", got)
	}
	v := Variant{Drop: map[int]bool{w.Events[0]: true}, Unchecked: staleChecks([]string{"check inbox.rows", "double_applied"}, []string{"double_applied"})}
	if got := checks(v); strings.Join(got, " ") != "outbox.unpublished published" {
		t.Errorf("an event left out, inbox.rows stale: checks %v, want outbox.unpublished and published", got)
	}
	viol := Verdict{Outcome: Violated, Broken: []string{"check inbox.rows"}}
	if !viol.same([]string{"check inbox.rows"}) || viol.same([]string{"check inbox.rows", "double_applied"}) {
		t.Error("same: a failed check counts only for a finding the history checker did not name")
	}
}

// A boundary the proxy could not attribute (a COMMIT inside a
// multi-statement query: its observer gave up, so the link may show no
// crossing) is a point listed as unclassifiable with the proxy's reason,
// never run: the counts and every report show it.
func TestUnclassifiableBoundariesAreListed(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	why := []sysrun.Unclassified{{Service: "consumer", Link: fault.ConsumerDB, Boundary: fault.Commit, Reason: "a COMMIT inside a multi-statement simple query of 4 statements: its reply cannot be held alone"}}
	ps := unclassifiedPoints(w, nil, why, 7)
	if len(ps) != 1 || ps[0].ID != 8 || ps[0].Service != "consumer" || ps[0].where() != "consumer_db.commit" || ps[0].Outcome != Unclassed ||
		!strings.Contains(ps[0].Why, "multi-statement") || !ps[0].Listed {
		t.Fatalf("points %+v", ps)
	}
	res := &Result{Workload: w, Observed: Verdict{Outcome: Held}, Points: ps}
	if c := res.Counts(); c[Unclassed] != 1 || res.Run() != 0 {
		t.Errorf("counts %v, run %d: want 1 unclassifiable and none run", c, res.Run())
	}
	var js bytes.Buffer
	if err := res.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"outcome": "unclassifiable"`) && !strings.Contains(js.String(), `"outcome":"unclassifiable"`) {
		t.Errorf("JSON (%v): %s", err, js.String())
	}
}

// A failure in a run is said at the workload's step, not in the variant's
// temp file (gone once explore ends): also with fault steps put in and an
// event left out, which move the variant's lines.
func TestFailuresAreSaidAtTheWorkload(t *testing.T) {
	src := "name: two events\nsteps:\n  - produce(event=a-1)\n  - produce(event=a-2)\n  - start: relay\n  - start: consumer\n  - expect: {inbox.rows: 2, within: 10s}\n"
	w, errs := parseWorkload(context.Background(), "wl.yaml", []byte(src), loadSystem(t))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	v := Variant{Drop: map[int]bool{0: true}, Faults: []Fault{{Step: 3, Service: "consumer", On: on("consumer_db.commit(table=processed_messages)"), Nth: 1, Do: "kill", Where: "step"}}}
	file := filepath.Join(t.TempDir(), ".explore-point-9.yaml")
	scs, errs := scenario.Parse(file, w.Render(filepath.Dir(file), "p", "", v), scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	sc := scs[0]
	last := sc.Steps[len(sc.Steps)-1].Pos
	why := fmt.Sprintf("%s:%d:%d: want 2, got 1", file, last.Line, last.Col+9)
	if got, want := newRecord(w, v, sc).atWorkload(sc, why), "wl.yaml:7:5: want 2, got 1"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestRandomWorkloadOf15000Events: soak --events 15000 failed with
// "random.yaml:1:1: more than 100000 YAML nodes (a bug in explore)", exit 3
// (10,000 worked). The workload and its schedule, rendered, load.
func TestRandomWorkloadOf15000Events(t *testing.T) {
	out := t.TempDir()
	w := defaultWorkload(t, out)
	long, errs := RandomWorkload(context.Background(), w.System, out, 15000, 1)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(long.Events) != 15000 {
		t.Fatalf("%d events, want 15000", len(long.Events))
	}
	cands := Candidates(w, consumerCrossings(w), []string{"kill"})
	body := long.Render(out, "r", "", Variant{Faults: Schedule(long, cands, []string{"kill"}, 0.1, 1)})
	if _, errs := parseWorkload(context.Background(), filepath.Join(out, "r.schedule"), body, nil); len(errs) > 0 {
		t.Errorf("the rendered schedule does not load: %v", errs)
	}
}

// What shrinking did is a record beside its prose: the counts, the produce
// steps it left out (each at its place) and the faults it dropped.
func TestShrinkingIsStructured(t *testing.T) {
	src := "name: two events\nsteps:\n  - produce(event=a-1)\n  - produce(event=a-2)\n  - start: relay\n  - start: consumer\n  - expect: {inbox.rows: 2, within: 10s}\n"
	w, errs := parseWorkload(context.Background(), "wl.yaml", []byte(src), loadSystem(t))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	kill := Fault{Step: 3, On: on("consumer_db.commit(table=processed_messages)"), Nth: 1, Do: "kill"}
	cut := Fault{Step: 2, On: on("broker.reply(XADD)"), Nth: 1, Do: "cut"}
	s := shrinkingOf(w, Variant{Faults: []Fault{kill, cut}}, Variant{Drop: map[int]bool{w.Events[1]: true}, Faults: []Fault{kill}}, 5, false)
	b, _ := json.Marshal(s)
	want := `{"events_before":2,"events_after":1,"faults_before":2,"faults_after":1,"runs":5,` +
		`"removed_events":["wl.yaml:4:5"],"removed_faults":["relay broker.reply(XADD) nth=1 do=cut"]}`
	if string(b) != want {
		t.Errorf("shrinking:\n got %s\nwant %s", b, want)
	}
	// Nothing removed: nothing listed, and the counts stay.
	if s := shrinkingOf(w, Variant{Faults: []Fault{kill}}, Variant{Faults: []Fault{kill}}, 1, true); len(s.RemovedEvents)+len(s.RemovedFaults) != 0 ||
		s.EventsAfter != 2 || !s.StoppedByBudget {
		t.Errorf("nothing shrunk: %+v", s)
	}
}
