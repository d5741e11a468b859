package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/world"
)

func benchRelay(ctx context.Context, p Params, row func(what, figure, note string)) error {
	f, err := relays(ctx, p, 2000, 200)
	if err != nil {
		return err
	}
	poll, kept, fresh := f.relays[0], f.relays[1], f.relays[2]
	row(fmt.Sprintf("polling relay, backlog of %d", f.n), fmt.Sprintf("%.0f events/s", poll.rate), "one pass: SELECT … FOR UPDATE SKIP LOCKED, pipelined XADDs, one UPDATE")
	row(fmt.Sprintf("CDC relay, kept connection, the same %d", f.n), fmt.Sprintf("%.0f events/s", kept.rate),
		fmt.Sprintf("the server streamed to the kept connection while the backlog was committed (this pass ran first, so that its decoding took no CPU from the polling pass); CDC/polling %.0f%%", 100*kept.rate/poll.rate))
	row(fmt.Sprintf("CDC relay, reconnecting, the same %d", f.n), fmt.Sprintf("%.0f events/s", fresh.rate),
		fmt.Sprintf("one pass on a new connection; CDC/polling %.0f%%", 100*fresh.rate/poll.rate))
	for _, r := range f.relays {
		note := "from the pass's start to the event published and marked"
		if r != poll {
			note = fmt.Sprintf("%s: %+d µs p50, %+d µs p99 against polling", r.how, (r.one50 - poll.one50).Microseconds(), (r.one99 - poll.one99).Microseconds())
		}
		row("relay pass for one new event, "+r.name, fmt.Sprintf("%s p50 / %s p99", us(r.one50), us(r.one99)), note)
	}
	return nil
}

// relayFigures compare the polling relay with the CDC relay, kept
// connected and reconnecting, on the same servers, database and stream.
type relayFigures struct {
	n      int
	relays []*relayer // polling, CDC kept, CDC reconnecting
}

// relayer is one relay under measurement.
type relayer struct {
	name, how    string
	pass         func(context.Context) (int, error) // one pass: events published
	ones         []time.Duration
	one50, one99 time.Duration // a pass that relays one just-committed event
	rate         float64       // events/s relaying the backlog
}

// relays measures the three relays: one event at a time, each relayed by
// every relay in turn (so that all three see the same load); then a
// backlog of n events committed before any relay runs. Each CDC relay has a
// slot of its own, created before anything is produced. The single events
// come first: a reconnecting pass decodes again from the slot's
// restart_lsn, which PostgreSQL moves on only at its periodic
// running-transactions records, so behind a large backlog each such pass
// also re-reads that WAL.
func relays(ctx context.Context, p Params, n, single int) (relayFigures, error) {
	f := relayFigures{n: n}
	w, err := world.Open(ctx, &world.Config{PGURL: p.PGURL, URLs: map[string]string{pipeline.Broker: p.Redis}, ConnectTimeout: p.ConnectTimeout, Parallel: 1}, world.Shape{Brokers: []string{pipeline.Broker}})
	if err != nil {
		return f, err
	}
	defer w.Close()
	pair, err := w.TakePair(ctx, pipeline.Broker)
	if err != nil {
		return f, err
	}
	defer w.ReturnPair(context.WithoutCancel(ctx), pair)
	env := pair.Env
	var slots []*cdc.Slot
	defer func() {
		for _, s := range slots {
			_ = s.Drop(context.WithoutCancel(ctx))
		}
	}()
	for range 2 {
		s := &cdc.Slot{Name: "drill_bench_" + strings.ToLower(rand.Text()[:8]), DB: env.Producer}
		if err := s.Create(ctx); err != nil {
			return f, fmt.Errorf("the CDC relay needs wal_level=logical: %w", err)
		}
		slots = append(slots, s)
	}
	poll := &pipeline.Relay{DB: env.Producer, Broker: env.Broker}
	cdcPass := func(s *cdc.Slot, keep bool) func(context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			r, err := s.Relay(ctx, env.Broker, cdc.RelayOptions{Keep: keep})
			return len(r.Published), err
		}
	}
	f.relays = []*relayer{
		{name: "polling", pass: func(ctx context.Context) (int, error) {
			r, err := poll.Relay(ctx, pipeline.RelayOptions{})
			return len(r.Published), err
		}},
		{name: "CDC kept connection", how: "stream, publish, confirm", pass: cdcPass(slots[0], true)},
		{name: "CDC reconnecting", how: "connect for replication, stream, publish, confirm, release", pass: cdcPass(slots[1], false)},
	}
	prod := &pipeline.Producer{DB: env.Producer}
	produce := func(i int) error {
		_, err := prod.Produce(ctx, pipeline.Transfer{EventID: fmt.Sprintf("bench-%d", i), From: "alice", To: "bob", Amount: 1, Currency: "USD"}, pipeline.NoFault)
		return err
	}
	for i := range single {
		if err := produce(n + i); err != nil {
			return f, err
		}
		for _, r := range f.relays {
			t0 := time.Now()
			if got, err := r.pass(ctx); err != nil || got != 1 {
				return f, errors.Join(err, fmt.Errorf("%s relay published %d of 1", r.name, got))
			}
			r.ones = append(r.ones, time.Since(t0))
		}
	}
	for i := range n {
		if err := produce(i); err != nil {
			return f, err
		}
	}
	// The kept relay first: its server process decodes the backlog as it
	// is committed, and would take the CPU from a polling pass run first.
	for _, r := range []*relayer{f.relays[1], f.relays[0], f.relays[2]} {
		t0 := time.Now()
		if got, err := r.pass(ctx); err != nil || got != n {
			return f, errors.Join(err, fmt.Errorf("%s relay published %d of %d", r.name, got, n))
		}
		r.rate = float64(n) / time.Since(t0).Seconds()
		slices.Sort(r.ones)
		r.one50, r.one99 = percentile(r.ones, 50), percentile(r.ones, 99)
	}
	return f, nil
}
