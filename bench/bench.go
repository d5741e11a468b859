// Package bench measures what the README's Speed table reports: managed
// start, isolation, the library at several --parallel, generated scenario
// counts, and a soak against a raw baseline (runner bench).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/soak"

	"github.com/outboxdrill/runner/servers"
)

// ErrScenariosFailed says a benchmark's scenarios did not pass: its figure
// would measure something else.
var ErrScenariosFailed = errors.New("scenarios failed")

// Params configures `runner bench`.
type Params struct {
	Scenarios      []*scenario.Scenario // the library, for wall times
	SoakEvents     int
	Growth         []int // generated scenario counts
	Repeat         int   // runs per figure; the median is reported
	PGURL, Redis   string
	ConnectTimeout time.Duration // for the servers given (runner.Params)
}

// Run measures what the speed targets speak of and prints one table.
func Run(ctx context.Context, p Params, out io.Writer) error {
	p.Repeat = max(1, p.Repeat)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "what\tfigure\tnote")
	row := func(what, figure, note string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", what, figure, note) }

	for _, cache := range []string{"warm", "empty"} {
		d, err := medianOf(p.Repeat, func() (time.Duration, error) { return managedStart(ctx, cache == "empty") })
		if err != nil {
			return err
		}
		row("managed start, "+cache+" cache", ms(d), "PostgreSQL and Redis, concurrently, until both answer")
	}
	setup, teardown, first, err := isolationCost(ctx, p)
	if err != nil {
		return err
	}
	row("isolation set-up", ms(setup), "median: a reset database pair and a new stream")
	row("isolation tear-down", ms(teardown), "median: delete the rows and the stream")
	row("first database pair", ms(first), "once per run: 2 × CREATE DATABASE + schemas")
	for _, par := range []int{1, 2, 4} {
		d, err := medianOf(p.Repeat, func() (time.Duration, error) { return wallTime(ctx, runner.Params{Parallel: par}, p.Scenarios) })
		if err != nil {
			return err
		}
		row(fmt.Sprintf("library (%d scenarios), --parallel %d", len(p.Scenarios), par), ms(d), "wall, managed servers started included")
	}
	for _, par := range []int{1, 4} {
		d, err := medianOf(p.Repeat, func() (time.Duration, error) { return waiting(ctx, p, par) })
		if err != nil {
			return err
		}
		row(fmt.Sprintf("20 scenarios waiting 300 ms each, --parallel %d", par), ms(d), "where parallel runs pay: scenarios that wait")
	}
	for _, n := range p.Growth {
		d, heap, err := growth(ctx, p, n)
		if err != nil {
			return err
		}
		row(fmt.Sprintf("%d generated scenarios, --parallel 2", n), ms(d), fmt.Sprintf("%.1f ms/scenario, peak heap %.1f MB", float64(d.Microseconds())/1000/float64(n), float64(heap)/1e6))
	}
	if p.SoakEvents > 0 {
		rep, err := soak.Soak(ctx, soak.Params{Events: p.SoakEvents, Faults: 0.1, Seed: 1, Workers: 2, PGURL: p.PGURL, Redis: p.Redis, Baseline: true})
		if err != nil {
			return err
		}
		verdict := "no violation"
		if len(rep.Violations) > 0 {
			verdict = fmt.Sprintf("%d VIOLATIONS", len(rep.Violations))
		}
		row(fmt.Sprintf("soak %d events, faults 0.1, --parallel 2", p.SoakEvents), fmt.Sprintf("%.0f events/s", rep.EventsPerSec()), verdict)
		row("raw baseline, same servers", fmt.Sprintf("%.0f events/s", rep.RawPerSec), fmt.Sprintf("pipeline/raw %.0f%%", 100*rep.EventsPerSec()/rep.RawPerSec))
		row("relay batch latency", fmt.Sprintf("%s → %s", rep.RelayFirst.Round(10*time.Microsecond), rep.RelayLast.Round(10*time.Microsecond)), "median, first tenth → last tenth of the soak")
		prox, err := soak.Soak(ctx, soak.Params{Events: p.SoakEvents, Faults: 0.1, Seed: 1, Workers: 2, PGURL: p.PGURL, Redis: p.Redis, ViaProxies: true})
		if err != nil {
			return err
		}
		verdict = "no violation"
		if len(prox.Violations) > 0 {
			verdict = fmt.Sprintf("%d VIOLATIONS", len(prox.Violations))
		}
		row("same soak through the protocol proxies", fmt.Sprintf("%.0f events/s", prox.EventsPerSec()),
			fmt.Sprintf("%s; proxied/direct %.0f%%", verdict, 100*prox.EventsPerSec()/rep.EventsPerSec()))
	}
	rf, err := relays(ctx, p, 2000, 50)
	if err != nil {
		return err
	}
	row(fmt.Sprintf("polling relay, backlog of %d", rf.n), fmt.Sprintf("%.0f events/s", rf.pollRate), "one pass: SELECT … FOR UPDATE SKIP LOCKED, pipelined XADDs, one UPDATE")
	row(fmt.Sprintf("CDC relay, the same %d events", rf.n), fmt.Sprintf("%.0f events/s", rf.cdcRate), fmt.Sprintf("one pass on the slot: back-to-back transactions published together, then one LSN confirm; CDC/polling %.0f%%", 100*rf.cdcRate/rf.pollRate))
	row("relay pass for one new event, polling", fmt.Sprintf("%s p50 / %s p99", us(rf.pollOne), us(rf.pollOne99)), "from the pass's start to the event published and marked")
	row("relay pass for one new event, CDC", fmt.Sprintf("%s p50 / %s p99", us(rf.cdcOne), us(rf.cdcOne99)),
		fmt.Sprintf("connect for replication, stream, publish, confirm, release: %+d µs p50 against polling", (rf.cdcOne-rf.pollOne).Microseconds()))
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
	var rd *servers.Redis
	var pgErr, rdErr error
	var wg sync.WaitGroup
	wg.Go(func() { pg, pgErr = servers.StartPostgres(ctx, opts) })
	rd, rdErr = servers.StartRedis(ctx, servers.RedisOptions{})
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
	w, err := runner.OpenWorld(ctx, &runner.Params{PGURL: p.PGURL, URLs: map[string]string{broker.Redis: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: 1})
	if err != nil {
		return 0, 0, 0, err
	}
	defer w.Close()
	var ups, downs []time.Duration
	for i := range 51 {
		t0 := time.Now()
		iso, err := w.TakePair(ctx, broker.Redis)
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
	scs, errs := scenario.Parse("generated.yaml", []byte(src))
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
	d, err := wallTime(ctx, runner.Params{PGURL: p.PGURL, URLs: map[string]string{broker.Redis: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: 2}, scs)
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
	scs, errs := scenario.Parse("waiting.yaml", []byte(src))
	if len(errs) > 0 {
		return 0, errs
	}
	return wallTime(ctx, runner.Params{PGURL: p.PGURL, URLs: map[string]string{broker.Redis: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: par}, scs)
}

// median is the middle of ds (upper middle for an even count).
func median(ds []time.Duration) time.Duration {
	c := slices.Clone(ds)
	slices.Sort(c)
	return c[len(c)/2]
}
