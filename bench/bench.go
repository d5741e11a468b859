// Package bench measures what the README's Speed table reports: managed
// start, isolation, the library at several --parallel, generated scenario
// counts, a soak against a raw baseline, the proxies beside a bare
// forwarder and the reference system's exploration (runner bench).
package bench

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxdrill/runner/pipeline"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/world"

	"github.com/outboxdrill/runner/servers"
)

// ErrScenariosFailed says a benchmark's scenarios did not pass: its figure
// would measure something else.
var ErrScenariosFailed = errors.New("scenarios failed")

// Params configures `runner bench`.
type Params struct {
	Scenarios    []*scenario.Scenario // the library, for wall times
	SoakEvents   int
	Growth       []int    // generated scenario counts
	Repeat       int      // runs per figure; the median is reported
	Only         []string // the Sections to measure (none: all)
	PGURL, Redis string
	// URLs are the other brokers' servers by broker name, for the proxy
	// figures (runner.Params.URLs); a broker without one gets the
	// runner's own server.
	URLs           map[string]string
	ConnectTimeout time.Duration // for the servers given (runner.Params)
	// Explore runs explore on the reference system, depth 1, at
	// --parallel N (0: the default, adaptive): the explore section's
	// figures (runner bench gives it; nil: that section says n/a).
	Explore func(ctx context.Context, parallel int) (ExploreRun, error)
}

// Sections are the parts of the table, in the order Run prints them; Only
// picks some of them (runner bench --only).
var Sections = []string{"start", "isolation", "library", "waiting", "growth", "soak", "relay", "proxy", "explore"}

// section prints one part of the table through row.
type section func(ctx context.Context, p Params, row func(what, figure, note string)) error

var sections = map[string]section{
	"start": benchStart, "isolation": benchIsolation, "library": benchLibrary, "waiting": benchWaiting,
	"growth": benchGrowth, "soak": benchSoak, "relay": benchRelay, "proxy": benchProxy, "explore": benchExplore,
}

// Run measures what the speed targets speak of and prints one table.
func Run(ctx context.Context, p Params, out io.Writer) error {
	p.Repeat = max(1, p.Repeat)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "what\tfigure\tnote")
	row := func(what, figure, note string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", what, figure, note) }
	for _, name := range Sections {
		if len(p.Only) > 0 && !slices.Contains(p.Only, name) {
			continue
		}
		if err := sections[name](ctx, p, row); err != nil {
			return err
		}
		tw.Flush() // a section's rows show before the next one starts
	}
	return nil
}

func benchStart(ctx context.Context, p Params, row func(what, figure, note string)) error {
	for _, cache := range []string{"warm", "empty"} {
		d, err := medianOf(p.Repeat, func() (time.Duration, error) { return managedStart(ctx, cache == "empty") })
		if err != nil {
			return err
		}
		row("managed start, "+cache+" cache", ms(d), "PostgreSQL and Redis, concurrently, until both answer")
	}
	return nil
}

func benchIsolation(ctx context.Context, p Params, row func(what, figure, note string)) error {
	setup, teardown, first, err := isolationCost(ctx, p)
	if err != nil {
		return err
	}
	row("isolation set-up", ms(setup), "median: a reset database pair and a new stream")
	row("isolation tear-down", ms(teardown), "median: delete the rows and the stream")
	row("first database pair", ms(first), "once per run: 2 × CREATE DATABASE + schemas")
	return nil
}

func benchLibrary(ctx context.Context, p Params, row func(what, figure, note string)) error {
	for _, par := range []int{1, 2, 4} {
		d, err := medianOf(p.Repeat, func() (time.Duration, error) { return wallTime(ctx, runner.Params{Parallel: par}, p.Scenarios) })
		if err != nil {
			return err
		}
		row(fmt.Sprintf("library (%d scenarios), --parallel %d", len(p.Scenarios), par), ms(d), "wall, managed servers started included")
	}
	return nil
}

func benchWaiting(ctx context.Context, p Params, row func(what, figure, note string)) error {
	for _, par := range []int{1, 4} {
		d, err := medianOf(p.Repeat, func() (time.Duration, error) { return waiting(ctx, p, par) })
		if err != nil {
			return err
		}
		row(fmt.Sprintf("20 scenarios waiting 300 ms each, --parallel %d", par), ms(d), "where parallel runs pay: scenarios that wait")
	}
	return nil
}

func benchGrowth(ctx context.Context, p Params, row func(what, figure, note string)) error {
	for _, n := range p.Growth {
		d, heap, err := growth(ctx, p, n)
		if err != nil {
			return err
		}
		row(fmt.Sprintf("%d generated scenarios, --parallel 2", n), ms(d), fmt.Sprintf("%.1f ms/scenario, peak heap %.1f MB", float64(d.Microseconds())/1000/float64(n), float64(heap)/1e6))
	}
	return nil
}

func benchProxy(ctx context.Context, p Params, row func(what, figure, note string)) error {
	rts, err := proxyLatency(ctx, p, 2000)
	if err != nil {
		return err
	}
	for _, rt := range rts {
		row("proxy added latency per round trip", rt.figure(), rt.note())
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func medianOf(n int, f func() (time.Duration, error)) (time.Duration, error) {
	var ds []time.Duration
	for range n {
		d, err := f()
		if err != nil {
			return 0, err
		}
		ds = append(ds, d)
	}
	return median(ds), nil
}

// managedStart starts and discards both managed servers; empty runs initdb
// with a fresh cache dir.
func managedStart(ctx context.Context, empty bool) (time.Duration, error) {
	opts := servers.PostgresOptions{NoCache: empty}
	start := time.Now()
	var pg *servers.Postgres
	var rd *redisserver.Server
	var pgErr, rdErr error
	var wg sync.WaitGroup
	wg.Go(func() { pg, pgErr = servers.StartPostgres(ctx, opts) })
	rd, rdErr = redisserver.Start(ctx, redisserver.Options{})
	wg.Wait()
	d := time.Since(start)
	if pg != nil {
		_ = pg.Discard(ctx)
	}
	if rd != nil {
		_ = rd.Discard(ctx)
	}
	return d, errors.Join(pgErr, rdErr)
}

// isolationCost times acquire and recycle on a warm pool.
func isolationCost(ctx context.Context, p Params) (setup, teardown, first time.Duration, err error) {
	w, err := world.Open(ctx, &world.Config{PGURL: p.PGURL, URLs: map[string]string{pipeline.Broker: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: 1}, world.Shape{Brokers: []string{pipeline.Broker}})
	if err != nil {
		return 0, 0, 0, err
	}
	defer w.Close()
	var ups, downs []time.Duration
	for i := range 51 {
		t0 := time.Now()
		iso, err := w.TakePair(ctx, pipeline.Broker)
		if err != nil {
			return 0, 0, 0, err
		}
		t1 := time.Now()
		if _, err := iso.Env.Producer.Exec(ctx, `INSERT INTO accounts VALUES ('a', 'USD', 1)`); err != nil {
			return 0, 0, 0, errors.Join(err, w.ReturnPair(ctx, iso))
		}
		t2 := time.Now()
		if err := w.ReturnPair(ctx, iso); err != nil {
			return 0, 0, 0, err
		}
		if i == 0 {
			first = t1.Sub(t0)
			continue
		}
		ups, downs = append(ups, t1.Sub(t0)), append(downs, time.Since(t2))
	}
	return median(ups), median(downs), first, nil
}

func wallTime(ctx context.Context, p runner.Params, scs []*scenario.Scenario) (time.Duration, error) {
	start := time.Now()
	rep, err := runner.Run(ctx, p, scs)
	if err == nil && rep.Failed() > 0 {
		err = fmt.Errorf("%w: %d of %d", ErrScenariosFailed, rep.Failed(), len(rep.Results))
	}
	return time.Since(start), err
}

// growth runs n generated seed-style scenarios (one matrix file) and samples
// the heap while they run.
func growth(ctx context.Context, p Params, n int) (time.Duration, uint64, error) {
	var vals []string
	for i := range n {
		vals = append(vals, fmt.Sprint(i+1))
	}
	src := `name: generated
matrix: {n: [` + strings.Join(vals, ", ") + `]}
steps:
  - produce: {amount: "${n}"}
  - relay(skip_mark)
  - expect: {stream.entries: 1, outbox.unpublished: 1}
  - relay
  - consume
    # applied and duplicate
  - expect: {projection: {accounting: {USD: {amount: "${n}", events: 1}}}, stream.pending: 0}
`
	scs, errs := scenario.Parse("generated.yaml", []byte(src), broker.Kinds())
	if len(errs) > 0 {
		return 0, 0, errs
	}
	runtime.GC()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	d, err := wallTime(ctx, runner.Params{PGURL: p.PGURL, URLs: map[string]string{pipeline.Broker: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: 2}, scs)
	close(stop)
	wg.Wait()
	return d, peak, err
}

// waiting runs 20 generated scenarios that each poll an empty stream for
// 300 ms, as a slow consumer would.
func waiting(ctx context.Context, p Params, par int) (time.Duration, error) {
	src := `name: waits
matrix: {n: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]}
steps:
  - produce
  - relay
  - consume
  - consume: {block: 300ms}
    expect: {delivered: 0}
`
	scs, errs := scenario.Parse("waiting.yaml", []byte(src), broker.Kinds())
	if len(errs) > 0 {
		return 0, errs
	}
	return wallTime(ctx, runner.Params{PGURL: p.PGURL, URLs: map[string]string{pipeline.Broker: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: par}, scs)
}

// median is the middle of ds (upper middle for an even count).
func median(ds []time.Duration) time.Duration {
	c := slices.Clone(ds)
	slices.Sort(c)
	return c[len(c)/2]
}
