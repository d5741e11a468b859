package explore

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/proxy/fault"
	"github.com/outboxdrill/runner/scenario"
)

// runOf builds a first point's run: the consumer's crossings, each with
// its restart (0: the start step's process), the first fault's marked.
type runOf struct {
	w    *Workload
	at   time.Time
	step int
	xs   []fault.Crossing
}

func (r *runOf) add(restart int, struck string, c fault.Crossing) {
	r.at = r.at.Add(time.Millisecond)
	c.Service, c.Start, c.Process, c.Restart, c.At, c.Fault = "consumer", r.w.StartPos(r.step), 2+restart, restart, r.at, struck
	r.xs = append(r.xs, c)
}

func (r *runOf) cmd(restart int, struck, op, reply string) {
	r.add(restart, struck, fault.Crossing{Link: fault.Broker, Op: op, Reply: reply})
}

func pairsOf(t *testing.T, first *Point, r *runOf) (run, pruned map[string]string) {
	t.Helper()
	first.Outcome, first.Service, first.Step = Held, "consumer", r.step
	pairs, out := Pairs(r.w, []*Point{first}, map[*Point][]fault.Crossing{first: r.xs}, []string{"kill"}, 3)
	run, pruned = map[string]string{}, map[string]string{}
	for _, p := range pairs {
		run[p.String()] = ""
	}
	for _, p := range out {
		pruned[p.String()] = p.Pruned
	}
	return run, pruned
}

// A second fault counts the first one's crossing only where both count
// it at the same moment: a Kafka Fetch is request(deliver)'s at its
// request and reply(deliver)'s at its answer. After a delay at the first
// Fetch's answer, the second Fetch is request(deliver)'s 2nd (it counted
// the first before the strike): taking one off, as for a crossing the
// strike took, put the second fault on the crossing the first had passed.
func TestASecondFaultCountsAsItsProxyDoes(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	r := &runOf{w: w, at: time.Now(), step: w.Starts[len(w.Starts)-1]}
	fetch := func(struck string) {
		r.add(0, struck, fault.Crossing{Link: fault.Broker, Op: "deliver", Reply: "entries", Request: fault.Strikes, Response: fault.Strikes})
	}
	fetch("reply(deliver) nth=1 do=delay(500ms)")
	r.add(0, "", fault.Crossing{Link: fault.ConsumerDB, Boundary: fault.Commit, Tables: []string{"inbox"}})
	fetch("")
	first := &Point{On: on("broker.reply(deliver)"), Nth: 1, Do: "delay(500ms)"}
	run, _ := pairsOf(t, first, r)
	for _, want := range []string{
		"consumer broker.reply(deliver) nth=1 do=delay(500ms) + also: broker.request(deliver) nth=2 do=kill", // counted before the strike
		"consumer broker.reply(deliver) nth=1 do=delay(500ms) + also: broker.reply(deliver) nth=1 do=kill",   // the strike took the 1st
	} {
		if _, ok := run[want]; !ok {
			t.Errorf("want the pair %s; pairs: %v", want, run)
		}
	}
}

// Pairs whose second fault would meet nothing the first left to recover
// from are pruned, saying why: a kill before the process did anything
// (its restart takes a depth-1 point's path), and a kill whose restart
// crossed nothing (nothing of the killed process comes after the strike).
func TestPairsWithNothingToRecoverFromArePruned(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	r := &runOf{w: w, at: time.Now(), step: w.Starts[len(w.Starts)-1]}
	r.cmd(0, "", "HELLO", "ok")
	r.cmd(0, "broker.request(XGROUP) nth=1 do=kill", "XGROUP", "none")
	r.cmd(1, "", "HELLO", "ok")
	r.cmd(1, "", "XGROUP", "ok")
	r.cmd(1, "", "XREADGROUP", "entries")
	run, pruned := pairsOf(t, &Point{On: on("broker.request(XGROUP)"), Nth: 1, Do: "kill"}, r)
	want := "consumer broker.request(XGROUP) nth=1 do=kill + then: broker.request(XREADGROUP) nth=1 do=kill"
	if why := pruned[want]; len(run) > 0 || !strings.HasPrefix(why, "a depth-1 point again: consumer broker.request(XREADGROUP) nth=1 do=kill (") {
		t.Errorf("%s: pruned %q, want as a depth-1 point again; run: %v", want, why, run)
	}

	r = &runOf{w: w, at: time.Now(), step: w.Starts[len(w.Starts)-1]}
	r.cmd(0, "", "XGROUP", "ok")
	r.cmd(0, "broker.reply(XREADGROUP) nth=1 do=kill", "XREADGROUP", "entries")
	r.cmd(0, "", "XACK", "ok") // in flight when the process died
	run, pruned = pairsOf(t, &Point{On: on("broker.reply(XREADGROUP)"), Nth: 1, Do: "kill"}, r)
	want = "consumer broker.reply(XREADGROUP) nth=1 do=kill + also: broker.request(XACK) nth=1 do=kill"
	if why := pruned[want]; len(run) > 0 || !strings.HasPrefix(why, "after its process ended (") {
		t.Errorf("%s: pruned %q, want after its process ended; run: %v", want, why, run)
	}

	// A kill after the process did something (the group's XGROUP) is
	// recovered from: its pairs run.
	r = &runOf{w: w, at: time.Now(), step: w.Starts[len(w.Starts)-1]}
	r.cmd(0, "", "XGROUP", "ok")
	r.cmd(0, "broker.request(XREADGROUP) nth=1 do=kill", "XREADGROUP", "none")
	r.cmd(1, "", "XGROUP", "ok")
	if run, _ = pairsOf(t, &Point{On: on("broker.request(XREADGROUP)"), Nth: 1, Do: "kill"}, r); len(run) == 0 {
		t.Errorf("a kill after the process's XGROUP: no pair run")
	}
}

// Shrinking a pair's schedule may leave its first fault out: its also:
// alone is that fault from the process's start, its then: alone nothing
// (a start step takes neither without fault:, and the variant did not
// load: "a bug in explore").
func TestAShrunkPairLoadsWithoutItsFirstFault(t *testing.T) {
	w := defaultWorkload(t, t.TempDir())
	c := w.Starts[len(w.Starts)-1]
	also := Fault{Step: c, On: on("broker.reply(XACK)"), Nth: 2, Do: "kill", Where: "also"}
	then := Fault{Step: c, On: on("broker.reply(XACK)"), Nth: 1, Do: "kill", Where: "then"}
	for _, second := range []Fault{also, then} {
		v := variantOf(w, []element{{fault: &second}}, nil)
		if second.Where == "also" && (len(v.Faults) != 1 || v.Faults[0].Where != "" || v.Faults[0].Nth != 2) {
			t.Errorf("also: alone became %v, want the step's fault, nth 2", v.Faults)
		}
		if second.Where == "then" && len(v.Faults) != 0 {
			t.Errorf("then: alone became %v, want nothing", v.Faults)
		}
		// The file is parsed where it was rendered: its system: path is
		// relative to that directory, not to the test's.
		dir := t.TempDir()
		if _, errs := scenario.Parse(filepath.Join(dir, "v.yaml"), w.Render(dir, "v", "", v), scenariotest.Kinds()); len(errs) > 0 {
			t.Errorf("%s alone does not load: %v", second.Where, errs)
		}
	}
}
