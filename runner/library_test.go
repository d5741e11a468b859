package runner

import (
	"bytes"
	"flag"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"
)

// TestLibraryAndGuarantees runs every scenario of scenarios/ on every broker,
// each a subtest named <file name without .yaml>/<broker> (a matrix
// variant's name adds its values), so one runs alone:
//
//	go test ./runner/ -run 'Library/seed-1.*/nats'
//
// Each passes, or is skipped with its reason — never on redis, which with the
// runner's own servers can run them all. The servers are the runner's own
// (so the process faults run too), started once for the whole test. The
// subtests run in parallel (-parallel) as a run's scenarios do (gate): those
// that fault a PostgreSQL first, one at a time on servers of their own,
// beside the others; those that fault a broker with no other on it.
//
// When the whole library ran, docs/broker-guarantees.md must be what this
// run generates (-update rewrites it) and the broker-specific scenarios
// must show their differences.
func TestLibraryAndGuarantees(t *testing.T) {
	t.Parallel()
	files, err := scenario.ExpandPaths([]string{"../scenarios"})
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	scs, errs := scenario.LoadFiles(files, scenariotest.Kinds())
	if len(errs) > 0 {
		t.Fatalf("invalid scenarios:\n%v", errs)
	}
	if testing.Short() {
		t.Skip("starts its own servers and runs the library on every broker")
	}
	// The runner's own PostgreSQL, Redis and NATS, so that the process-fault
	// scenarios run too; RabbitMQ as the tests find it.
	rabbit := testservers.URL(t, broker.RabbitMQ)
	s, err := OpenSessionFor(t.Context(), Params{Parallel: testParallel(), Brokers: broker.Names(), URLs: map[string]string{broker.RabbitMQ: rabbit}, Timeout: time.Minute}, scs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the servers: %v", err)
		}
	})
	p, w := &s.p, s.w

	rep := &report.Report{RunID: w.RunID, Brokers: p.Brokers, Labels: w.Labels()}
	results := make([]*report.Result, len(scs)*len(p.Brokers)) // in Run's order
	var mu sync.Mutex                                          // ran
	ran := 0
	// After every subtest: the checks that need the whole library.
	t.Cleanup(func() {
		if ran < len(results) {
			t.Logf("%d of %d scenario runs selected: docs/broker-guarantees.md and the broker differences not checked", ran, len(results))
			return
		}
		for _, r := range results {
			if r == nil {
				return // that subtest failed for it
			}
		}
		rep.Results = results
		brokerScenariosDiffer(t, rep)
		var doc bytes.Buffer
		if err := report.WriteGuarantees(&doc, rep); err != nil {
			t.Fatal(err)
		}
		holdsHaveEvidence(t, rep, doc.String())
		everyLimitCited(t, rep)
		testutil.Golden(t, "docs/broker-guarantees.md", doc.Bytes())
	})

	// The Exclusive scenarios first, one at a time; on servers of their own
	// (the runner's: faultSet) beside the others, else while the parallel
	// subtests wait for this function to return: the servers drain once,
	// not once per process fault.
	g := gate{ex: exclusion{split: w.FaultSet()}}
	serial := func(sc *scenario.Scenario) bool { return g.ex.runsAlone(job{sc: sc}) }
	for _, exclusive := range []bool{true, false} {
		for i, sc := range scs {
			if sc.Exclusive != exclusive {
				continue
			}
			t.Run(strings.TrimSuffix(filepath.Base(sc.File), ".yaml")+sc.Variant, func(t *testing.T) {
				if !serial(sc) {
					t.Parallel()
				}
				if sc.Description == "" {
					t.Errorf("%s: the library's scenarios say in words what they prove; description is empty", sc.File)
				}
				for j, b := range p.Brokers {
					t.Run(b, func(t *testing.T) {
						if !serial(sc) {
							t.Parallel()
						}
						mu.Lock()
						ran++
						mu.Unlock()
						r := g.run(t, p, w, job{sc: sc, broker: b})
						results[i*len(p.Brokers)+j] = r
						switch {
						case !r.Passed():
							t.Errorf("%s failed:\n%s", r.Name(), report.FormatResult(r, true))
						case r.Skipped != "" && b == broker.Redis && !strings.Contains(r.Skipped, "which redis does not have"):
							// Only a capability Redis Streams lacks, cited, may
							// skip a scenario on the reference broker.
							t.Errorf("%s: skipped on the reference broker with its own servers: %s", r.Name(), r.Skipped)
						case r.Skipped != "":
							t.Skipf("skipped at %s", r.Skipped)
						}
					})
				}
			})
		}
	}
}

// gate lets the library's subtests share the servers as a run's workers do
// (schedule): a scenario the runner marks Exclusive runs alone, one marked
// BrokerExclusive with no other on its broker, every other one alongside
// the others.
type gate struct {
	mu    sync.Mutex
	freed *sync.Cond
	ex    exclusion
}

// run runs one job on w through the runner's own scheduler, and fails t when
// the job leaves no result.
func (g *gate) run(t *testing.T, p *Params, w *world.World, j job) *report.Result {
	t.Helper()
	g.mu.Lock()
	if g.freed == nil {
		g.freed = sync.NewCond(&g.mu)
	}
	for !g.ex.admits(j) {
		g.freed.Wait()
	}
	g.ex.enter(j)
	if others := g.ex.running - 1; g.ex.runsAlone(j) && others != 0 {
		t.Errorf("%s runs alone, yet %d other scenarios ran alongside", j.sc.File, others)
	}
	if n := g.ex.onBroker[j.broker]; j.sc.BrokerExclusive && n != -1 {
		t.Errorf("%s is BrokerExclusive, yet %d other scenarios on %s ran alongside", j.sc.File, n, j.broker)
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.ex.leave(j)
		g.mu.Unlock()
		g.freed.Broadcast()
	}()
	res, err := schedule(t.Context(), p, w, []job{j})
	if err != nil {
		t.Errorf("run: %v", err)
	}
	if res[0] == nil {
		t.FailNow()
	}
	return res[0]
}

// testParallel is -parallel: how many subtests run at once.
func testParallel() int {
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, ok := f.Value.(flag.Getter).Get().(int); ok {
			return n
		}
	}
	return 4
}

// brokerScenariosDiffer checks that the broker-specific scenarios show what
// they pin: different outcomes on different brokers, not one result thrice.
func brokerScenariosDiffer(t *testing.T, rep *report.Report) {
	t.Helper()
	outcome := func(file, b string, step int, key string) (int64, string) {
		for _, r := range rep.Results {
			if strings.HasSuffix(r.Scenario.File, file) && r.Broker == b {
				if r.Skipped != "" {
					return -1, r.Skipped
				}
				return r.Steps[step].Result.Outcome[key], ""
			}
		}
		return -1, "no result"
	}
	for _, c := range []struct {
		file string
		step int
		key  string
		want map[string]int64 // -1: skipped
	}{
		{"jetstream-dedupe-window.yaml", 9, "duplicate", map[string]int64{broker.Redis: 2, broker.NATS: 1, broker.RabbitMQ: 2}},
		{"rabbitmq-channel-loss-requeues-everything.yaml", 5, "redelivered", map[string]int64{broker.Redis: 0, broker.NATS: 1, broker.RabbitMQ: 1}},
		{"redis-pel-survives-consumer-crash.yaml", 5, "redelivered", map[string]int64{broker.Redis: 1, broker.NATS: -1, broker.RabbitMQ: -1}},
	} {
		for b, want := range c.want {
			if got, why := outcome(c.file, b, c.step, c.key); got != want {
				t.Errorf("%s on %s: step %d %s = %d (%s), want %d", c.file, b, c.step+1, c.key, got, why, want)
			}
		}
	}
}

// holdsHaveEvidence fails for a "holds" in the guarantees document without
// a scenario that executed that window's fault on that broker and passed.
func holdsHaveEvidence(t *testing.T, rep *report.Report, doc string) {
	t.Helper()
	title := ""
	for _, line := range strings.Split(doc, "\n") {
		if t, ok := strings.CutPrefix(line, "### "); ok {
			title = t
		}
		for _, b := range rep.Brokers {
			if !strings.HasPrefix(line, "- **"+b+"**: **holds**") {
				continue
			}
			if !slices.ContainsFunc(rep.Results, func(r *report.Result) bool { return r.Broker == b && report.Shows(title, r) }) {
				t.Errorf("guarantees: %q holds on %s, but no scenario executed its fault there and passed", title, b)
			}
		}
	}
}

// everyLimitCited fails for a capability a broker lacks, or a skip or n/a,
// without a reason that cites the broker's documentation.
func everyLimitCited(t *testing.T, rep *report.Report) {
	t.Helper()
	for b, caps := range report.Capabilities(rep) {
		for _, c := range broker.AllCapabilities {
			if why := broker.WhyNot(b, c); !caps.Has(c) && !strings.Contains(why, "https://") {
				t.Errorf("%s lacks %s without citing its documentation: %q", b, c, why)
			}
		}
	}
	for _, r := range rep.Results {
		for _, n := range r.NA {
			if !strings.Contains(n.Reason, "https://") {
				t.Errorf("%s: n/a without a citation: %s", r.Name(), n)
			}
		}
		if r.Skipped != "" && !strings.Contains(r.Skipped, "https://") && !strings.Contains(r.Skipped, "runner's own") {
			t.Errorf("%s: skipped without a citation: %s", r.Name(), r.Skipped)
		}
	}
}
