package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/runner"
)

func benchRelay(ctx context.Context, p Params, row func(what, figure, note string)) error {
	rf, err := relays(ctx, p, 2000, 50)
	if err != nil {
		return err
	}
	row(fmt.Sprintf("polling relay, backlog of %d", rf.n), fmt.Sprintf("%.0f events/s", rf.pollRate), "one pass: SELECT … FOR UPDATE SKIP LOCKED, pipelined XADDs, one UPDATE")
	row(fmt.Sprintf("CDC relay, the same %d events", rf.n), fmt.Sprintf("%.0f events/s", rf.cdcRate), fmt.Sprintf("one pass on the slot: back-to-back transactions published together, then one LSN confirm; CDC/polling %.0f%%", 100*rf.cdcRate/rf.pollRate))
	row("relay pass for one new event, polling", fmt.Sprintf("%s p50 / %s p99", us(rf.pollOne), us(rf.pollOne99)), "from the pass's start to the event published and marked")
	row("relay pass for one new event, CDC", fmt.Sprintf("%s p50 / %s p99", us(rf.cdcOne), us(rf.cdcOne99)),
		fmt.Sprintf("connect for replication, stream, publish, confirm, release: %+d µs p50 against polling", (rf.cdcOne-rf.pollOne).Microseconds()))
	return nil
}

// relayFigures compares the polling relay with the CDC relay on the same
// servers, database and stream.
type relayFigures struct {
	n                   int
	pollRate, cdcRate   float64       // events/s relaying a backlog of n
	pollOne, cdcOne     time.Duration // median pass that relays one just-committed event
	pollOne99, cdcOne99 time.Duration
}

// relays measures both relays: one event at a time, each relayed by a
// polling pass and then by a CDC pass; then a backlog of n events
// (committed before either relay runs, while the slot exists, so both see
// the same events). The single events come first: a CDC pass reconnects
// and decodes again from the slot's restart_lsn, which PostgreSQL moves on
// only at its periodic running-transactions records, so behind a large
// backlog each pass also re-reads that WAL.
func relays(ctx context.Context, p Params, n, single int) (relayFigures, error) {
	f := relayFigures{n: n}
	w, err := runner.OpenWorld(ctx, &runner.Params{PGURL: p.PGURL, RedisURL: p.Redis, ConnectTimeout: p.ConnectTimeout, Parallel: 1})
	if err != nil {
		return f, err
	}
	defer w.Close()
	pair, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		return f, err
	}
	defer w.ReturnPair(context.WithoutCancel(ctx), pair)
	env := pair.Env
	slot := &cdc.Slot{Name: "drill_bench_" + strings.ToLower(rand.Text()[:8]), DB: env.Producer}
	if err := slot.Create(ctx); err != nil {
		return f, fmt.Errorf("the CDC relay needs wal_level=logical: %w", err)
	}
	defer slot.Drop(context.WithoutCancel(ctx))
	prod := &pipeline.Producer{DB: env.Producer}
	poll := &pipeline.Relay{DB: env.Producer, Broker: env.Broker}
	produce := func(i int) error {
		_, err := prod.Produce(ctx, pipeline.Transfer{EventID: fmt.Sprintf("bench-%d", i), From: "alice", To: "bob", Amount: 1, Currency: "USD"}, pipeline.NoFault)
		return err
	}
	var polls, cdcs []time.Duration
	for i := range single {
		if err := produce(n + i); err != nil {
			return f, err
		}
		t0 := time.Now()
		if _, err := poll.Relay(ctx, pipeline.RelayOptions{}); err != nil {
			return f, err
		}
		t1 := time.Now()
		if _, err := slot.Relay(ctx, env.Broker, cdc.RelayOptions{}); err != nil {
			return f, err
		}
		polls, cdcs = append(polls, t1.Sub(t0)), append(cdcs, time.Since(t1))
	}
	for i := range n {
		if err := produce(i); err != nil {
			return f, err
		}
	}
	t0 := time.Now()
	pr, err := poll.Relay(ctx, pipeline.RelayOptions{})
	pollTook := time.Since(t0)
	if err != nil || len(pr.Published) != n {
		return f, errors.Join(err, fmt.Errorf("polling relay published %d of %d", len(pr.Published), n))
	}
	t0 = time.Now()
	cr, err := slot.Relay(ctx, env.Broker, cdc.RelayOptions{})
	cdcTook := time.Since(t0)
	if err != nil || len(cr.Published) != n {
		return f, errors.Join(err, fmt.Errorf("CDC relay published %d of %d", len(cr.Published), n))
	}
	f.pollRate, f.cdcRate = float64(n)/pollTook.Seconds(), float64(n)/cdcTook.Seconds()
	slices.Sort(polls)
	slices.Sort(cdcs)
	f.pollOne, f.cdcOne = percentile(polls, 50), percentile(cdcs, 50)
	f.pollOne99, f.cdcOne99 = percentile(polls, 99), percentile(cdcs, 99)
	return f, nil
}
