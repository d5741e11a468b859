// Package soak drives many events through the reference pipeline with faults
// in every window the steps know, drains it and judges the whole history with
// the same checker as the scenarios (runner soak).
package soak

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/history"
	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/runner"
)

// Params configures a soak run: N events through the real pipeline with
// faults chosen at random from every window the steps know.
type Params struct {
	Events  int
	Faults  float64 // probability per decision point, 0..1
	Seed    uint64
	Workers int // concurrent producers and consumers
	Batch   int // relay and consume batch size (default 100)
	PGURL   string
	Redis   string
	// ConnectTimeout bounds the wait for a given server (runner.Params).
	ConnectTimeout time.Duration
	// Baseline also measures the raw baseline on the same servers first.
	Baseline bool
	// ViaProxies runs every connection through an unarmed protocol proxy
	// (Redis only): what the proxies cost a team's service.
	ViaProxies bool
	// Judged, when set, gets the report as soon as the history is judged:
	// before the database pair and the servers are cleaned up, which takes
	// a while after a long soak.
	Judged func(*Report)
}

// Validate says what is wrong with p, if anything: a soak needs events, a
// fault rate from 0 to 1, and no negative workers or batch (0: the default).
func (p Params) Validate() error {
	switch {
	case p.Events < 1:
		return fmt.Errorf("events: want 1 or more, got %d", p.Events)
	case !(p.Faults >= 0 && p.Faults <= 1): // NaN too
		return fmt.Errorf("faults: want a rate from 0 to 1, got %g", p.Faults)
	case p.Workers < 0:
		return fmt.Errorf("workers: want 1 or more (0: 1), got %d", p.Workers)
	case p.Batch < 0:
		return fmt.Errorf("batch: want 1 or more (0: 100), got %d", p.Batch)
	}
	return nil
}

// Report is what a soak run measured and judged.
type Report struct {
	Params     Params
	RunID      string // names the run's databases and streams (drill_RUNID_…)
	Duration   time.Duration
	Faults     map[string]int64
	Outcomes   map[pipeline.Outcome]int64
	RelayFirst time.Duration // median relay batch latency, first tenth of the run
	RelayLast  time.Duration // and last tenth
	History    Totals
	// Violations are what history.Check found in the soak's history.
	Violations []history.Violation
	RawPerSec  float64 // the raw baseline's events/s, when measured
}

// EventsPerSec is the soak's throughput, faults and recovery included.
func (r *Report) EventsPerSec() float64 { return float64(r.Params.Events) / r.Duration.Seconds() }

// Work is what the soak had the servers do for its events, in units of
// what the raw baseline does for as many: its producer transactions (one
// a fault rolled back too), stream entries and deliveries, each one per
// event there. 1 without faults; a fault's recovery is work the baseline
// never does (a rolled-back produce done again, a batch published again
// because it was not marked, a pass that failed or did not ack delivered
// again), and this says how much of it there was.
func (r *Report) Work() float64 {
	var delivered int64
	for _, n := range r.Outcomes {
		delivered += n
	}
	produced := int64(r.Params.Events) + r.Faults["produce.divzero"]
	return float64(produced+int64(r.History.StreamEntries)+delivered) / float64(3*r.Params.Events)
}

const soakConsumer = "accounting"

// pollEvery is how long a relay or consumer pass that did not fill its
// batch waits before the next, as a poller does (an outbox poller's
// interval, Debezium's poll.interval.ms). Passing again at once made
// batches of one to three events, each with a SELECT, XADD and marking
// UPDATE or an XREADGROUP and XACK of its own: with 2,000 events, 1,000 to
// 2,000 relay passes and 1,000 to 3,000 consumer reads where the raw
// baseline makes 20 of each, the most CPU of the soak beyond the raw
// baseline's work, and the more so the busier the machine (the producers
// slower, the batches smaller).
const pollEvery = 20 * time.Millisecond

// soak is one soak run's shared state.
type soak struct {
	p       Params
	env     pipelineEnv
	faults  sync.Map // kind → *atomic.Int64
	outMu   sync.Mutex
	outs    map[pipeline.Outcome]int64
	relayMu sync.Mutex
	relayNs []time.Duration
	hist    soakHistory
	// A fault drawn for a pass that found no work waits for the next pass
	// that has some (each worker's own, read by its goroutine only): so
	// every fault drawn strikes, and strikes where the window is.
	carrySkipMark bool
	carryConsume  []string // by worker: "consume.divzero", "consume.skip_ack" or ""
}

type pipelineEnv struct {
	prod  *pipeline.Producer
	relay *pipeline.Relay
	cons  *pipeline.Consumer
	b     broker.Broker
}

// Soak drives p.Events events through producer, relay and consumer with
// random faults, drains the pipeline, then judges the whole history.
func Soak(ctx context.Context, p Params) (*Report, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Workers, p.Batch = max(1, p.Workers), cmpOr(p.Batch, 100)
	w, err := runner.OpenWorld(ctx, &runner.Params{PGURL: p.PGURL, URLs: map[string]string{broker.Redis: p.Redis}, Parallel: 1, ConnectTimeout: p.ConnectTimeout})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	var raw float64
	if p.Baseline {
		if raw, err = rawBaseline(ctx, w, p.Events, p.Workers, p.Batch); err != nil {
			return nil, fmt.Errorf("raw baseline: %w", err)
		}
	}
	iso, err := w.TakePair(ctx, broker.Redis)
	if err != nil {
		return nil, err
	}
	// Nobody takes the pair next: dropped whole, not reset row by row.
	defer w.DiscardPair(ctx, iso)
	env := pipelineEnv{
		prod:  &pipeline.Producer{DB: iso.Env.Producer},
		relay: &pipeline.Relay{DB: iso.Env.Producer, Broker: iso.Env.Broker},
		cons:  &pipeline.Consumer{DB: iso.Env.Consumer, Broker: iso.Env.Broker},
		b:     iso.Env.Broker,
	}
	if p.ViaProxies {
		var undo func()
		if env, undo, err = viaProxies(ctx, w, iso); err != nil {
			return nil, err
		}
		defer undo()
	}
	s := &soak{p: p, outs: map[pipeline.Outcome]int64{}, env: env, carryConsume: make([]string, p.Workers)}
	start := time.Now()
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	rep := &Report{Params: p, RunID: w.RunID, Duration: time.Since(start), Faults: s.faultCounts(), Outcomes: s.outs, RawPerSec: raw}
	rep.RelayFirst, rep.RelayLast = s.relayTrend()
	rep.History, rep.Violations, err = s.hist.judge(ctx, s.env)
	if err == nil && p.Judged != nil {
		p.Judged(rep)
	}
	return rep, err
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// draw decides, from the seed and the decision's name alone, whether a
// fault strikes: the same seed injects the same faults at the same points.
func (s *soak) draw(kind string, n int) bool {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", s.p.Seed, kind, n)
	return rand.New(rand.NewPCG(h.Sum64(), s.p.Seed)).Float64() < s.p.Faults
}

// struck counts a fault of kind that met work: one drawn for a pass that
// found nothing to relay or read struck nothing, and is not reported.
func (s *soak) struck(kind string) {
	c, _ := s.faults.LoadOrStore(kind, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

// fault is draw for a fault that always meets work (a produce, a replay
// of what was just published), counted when drawn.
func (s *soak) fault(kind string, n int) bool {
	if !s.draw(kind, n) {
		return false
	}
	s.struck(kind)
	return true
}

func (s *soak) faultCounts() map[string]int64 {
	out := map[string]int64{}
	s.faults.Range(func(k, v any) bool { out[k.(string)] = v.(*atomic.Int64).Load(); return true })
	return out
}

// run drives the events. With one worker it runs in lock-step — produce a
// batch, relay, consume, reclaim — so that the same seed replays exactly;
// with more, producers, a relay, consumers and a reclaimer run concurrently
// (the same faults strike the same decision points, the interleaving varies).
// Then it drains without faults.
func (s *soak) run(ctx context.Context) error {
	var err error
	if s.p.Workers == 1 {
		err = s.lockstep(ctx)
	} else {
		err = s.concurrent(ctx)
	}
	if err != nil {
		return err
	}
	return s.drain(ctx)
}

func (s *soak) lockstep(ctx context.Context) error {
	passes := 0
	for i := 0; i < s.p.Events; i++ {
		if err := s.produce(ctx, i); err != nil {
			return err
		}
		if (i+1)%s.p.Batch != 0 && i != s.p.Events-1 {
			continue
		}
		for { // relay everything produced so far
			passes++
			n, err := s.relayPass(ctx, passes)
			if err != nil {
				return err
			}
			if n < s.p.Batch {
				break
			}
		}
		for { // consume everything new
			passes++
			n, err := s.consumePass(ctx, 0, passes)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		if _, err := s.reclaimPass(ctx, 0); err != nil { // no other worker is active
			return err
		}
	}
	return nil
}

func (s *soak) concurrent(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var producing sync.WaitGroup
	for wk := range s.p.Workers {
		producing.Go(func() {
			for i := wk; i < s.p.Events; i += s.p.Workers {
				if err := s.produce(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var workers sync.WaitGroup
	loop := func(pass func(n int) (int, error), pause time.Duration) {
		for n := 0; ; n++ {
			got, err := pass(n)
			if err != nil {
				cancel(err)
				return
			}
			if got >= s.p.Batch && pause == 0 {
				continue // a full batch: more is waiting
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-time.After(max(pause, pollEvery)):
			}
		}
	}
	workers.Go(func() { loop(func(n int) (int, error) { return s.relayPass(ctx, n) }, 0) })
	for wk := range s.p.Workers {
		workers.Go(func() { loop(func(n int) (int, error) { return s.consumePass(ctx, wk, n) }, 0) })
	}
	workers.Go(func() {
		loop(func(int) (int, error) { return s.reclaimPass(ctx, 200*time.Millisecond) }, 50*time.Millisecond)
	})
	producing.Wait()
	close(done)
	workers.Wait()
	return context.Cause(ctx)
}

func (s *soak) produce(ctx context.Context, i int) error {
	t := pipeline.Transfer{EventID: fmt.Sprintf("e-%d", i), From: fmt.Sprintf("acct-%d", i%7), To: fmt.Sprintf("acct-%d", (i+3)%7),
		Amount: int64(1 + i%97), Currency: []string{"USD", "EUR", "JPY"}[i%3]}
	if s.fault("produce.divzero", i) {
		res, err := s.env.prod.Produce(ctx, t, pipeline.DivZero)
		if err != nil {
			return err
		}
		if !res.Failed { // the retry below could only fail: say why
			s.hist.committed(res)
			return fmt.Errorf("produce %s with divzero committed instead of rolling back", t.EventID)
		}
	}
	res, err := s.env.prod.Produce(ctx, t, pipeline.NoFault) // the business retries
	s.hist.committed(res)
	return err
}

// relayPass relays one batch; skip_mark and a raw replay of its last event
// strike at random. It returns how many rows it published.
func (s *soak) relayPass(ctx context.Context, n int) (int, error) {
	start := time.Now()
	skipMark := s.carrySkipMark || s.draw("relay.skip_mark", n)
	res, err := s.env.relay.Relay(ctx, pipeline.RelayOptions{Limit: s.p.Batch, SkipMark: skipMark})
	s.hist.published("relay", false, res.Published...)
	s.carrySkipMark = skipMark && len(res.Published) == 0
	if err != nil || len(res.Published) == 0 {
		return 0, err
	}
	if skipMark {
		s.struck("relay.skip_mark")
	}
	s.relayMu.Lock()
	s.relayNs = append(s.relayNs, time.Since(start))
	s.relayMu.Unlock()
	if last := res.Published[len(res.Published)-1]; s.fault("publish.replay", n) {
		if err := s.replay(ctx, last.EventID); err != nil {
			return 0, err
		}
	}
	return len(res.Published), nil
}

// replay publishes an event again with the payload the outbox holds: a
// redelivery under a new entry id.
func (s *soak) replay(ctx context.Context, eventID string) error {
	var payload string
	if err := s.env.prod.DB.QueryRow(ctx, `SELECT payload::text FROM outbox WHERE event_id = $1`, eventID).Scan(&payload); err != nil {
		return err
	}
	ids, err := s.env.b.Publish(ctx, []broker.Message{{EventID: eventID, Payload: payload}})
	for _, id := range ids {
		s.hist.published("replay", true, pipeline.Published{EventID: eventID, EntryID: id, Payload: payload})
	}
	return err
}

// consumePass reads one batch as worker wk; divzero or skip_ack strike the
// whole pass at random. It returns how many entries it handled.
func (s *soak) consumePass(ctx context.Context, wk, n int) (int, error) {
	opt := pipeline.ConsumeOptions{Consumer: soakConsumer, Worker: fmt.Sprintf("worker-%d", wk), Count: s.p.Batch, Block: time.Millisecond}
	key := hashInt(fmt.Sprintf("%d/%d", wk, n))
	kind := s.carryConsume[wk]
	switch {
	case kind != "":
	case s.draw("consume.divzero", key):
		kind = "consume.divzero"
	case s.draw("consume.skip_ack", key):
		kind = "consume.skip_ack"
	}
	if kind == "consume.divzero" {
		opt.Fault = pipeline.DivZero
	}
	opt.SkipAck = kind == "consume.skip_ack"
	res, err := s.consume(ctx, opt)
	s.carryConsume[wk] = ""
	switch {
	case kind == "":
	case len(res.Handled) > 0:
		s.struck(kind)
	default:
		s.carryConsume[wk] = kind // no work met: the next pass with some takes it
	}
	return len(res.Handled), err
}

// reclaimPass takes over entries left pending by failed or crashed passes, as
// a restarted worker would, once they have been idle that long.
func (s *soak) reclaimPass(ctx context.Context, idle time.Duration) (int, error) {
	res, err := s.claim(ctx, pipeline.ConsumeOptions{Consumer: soakConsumer, Worker: "reclaimer", Idle: idle, Count: s.p.Batch})
	return len(res.Handled), err
}

// consume and claim run a pass, counting and recording what it handled
// (also when it failed part way).
func (s *soak) consume(ctx context.Context, opt pipeline.ConsumeOptions) (pipeline.ConsumeResult, error) {
	res, err := s.env.cons.Consume(ctx, opt)
	s.count(res)
	s.hist.handled("consume", opt, false, res)
	return res, err
}

func (s *soak) claim(ctx context.Context, opt pipeline.ConsumeOptions) (pipeline.ConsumeResult, error) {
	res, err := s.env.cons.Claim(ctx, opt)
	s.count(res)
	s.hist.handled("claim", opt, true, res)
	return res, err
}

// drain relays what is left and handles every new and pending entry, with no
// more faults, until nothing is unpublished, new or pending.
func (s *soak) drain(ctx context.Context) error {
	for range 1000 {
		res, err := s.env.relay.Relay(ctx, pipeline.RelayOptions{})
		s.hist.published("relay", false, res.Published...)
		if err != nil {
			return err
		}
		read, err := s.consume(ctx, pipeline.ConsumeOptions{Consumer: soakConsumer, Worker: "drainer", Block: time.Millisecond})
		if err != nil {
			return err
		}
		claimed, err := s.claim(ctx, pipeline.ConsumeOptions{Consumer: soakConsumer, Worker: "drainer"})
		if err != nil {
			return err
		}
		if len(res.Published)+len(read.Handled)+len(claimed.Handled) == 0 {
			return nil
		}
	}
	return errors.New("the pipeline did not drain in 1000 passes")
}

func (s *soak) count(res pipeline.ConsumeResult) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	for _, h := range res.Handled {
		s.outs[h.Outcome]++
	}
}

// relayTrend is the median relay batch latency of the first and the last
// tenth of the run: flat means published rows do not slow the relay down.
func (s *soak) relayTrend() (first, last time.Duration) {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	n := len(s.relayNs)
	if n == 0 {
		return 0, 0
	}
	k := max(1, n/10)
	return median(s.relayNs[:k]), median(s.relayNs[n-k:])
}

func median(ds []time.Duration) time.Duration {
	c := slices.Clone(ds)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2]
}

func hashInt(s string) int {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int(h.Sum32())
}

// Format renders the report for the console.
func (r *Report) Format() string {
	var b strings.Builder
	p := r.Params
	fmt.Fprintf(&b, "soak: %d events, faults %.2f, seed %d, parallel %d\n", p.Events, p.Faults, p.Seed, p.Workers)
	fmt.Fprintf(&b, "  throughput   %.0f events/s (%s)\n", r.EventsPerSec(), r.Duration.Round(time.Millisecond))
	if r.RawPerSec > 0 {
		fmt.Fprintf(&b, "  raw baseline %.0f events/s on the same servers: pipeline/raw %.0f%%\n", r.RawPerSec, 100*r.EventsPerSec()/r.RawPerSec)
	}
	var kinds []string
	for k, n := range r.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "  faults       %s\n", orNone(strings.Join(kinds, ", ")))
	fmt.Fprintf(&b, "  deliveries   applied %d, duplicate %d, failed %d, conflict %d\n",
		r.Outcomes[pipeline.Applied], r.Outcomes[pipeline.Duplicate], r.Outcomes[pipeline.Failed], r.Outcomes[pipeline.Conflict])
	fmt.Fprintf(&b, "  history      %d committed, %d stream entries, %d in the inbox, %d pending\n",
		r.History.Committed, r.History.StreamEntries, r.History.Applied, r.History.Pending)
	fmt.Fprintf(&b, "  relay batch  median %s in the first tenth, %s in the last\n", r.RelayFirst.Round(10*time.Microsecond), r.RelayLast.Round(10*time.Microsecond))
	if len(r.Violations) == 0 {
		fmt.Fprintf(&b, "  verdict      OK: none of %s\n", strings.Join(history.ReferenceInvariants(), ", "))
		return b.String()
	}
	fmt.Fprintf(&b, "  verdict      %d VIOLATION(S)\n", len(r.Violations))
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "    ... and %d more\n", len(r.Violations)-20)
			break
		}
		fmt.Fprintf(&b, "    %s\n", v)
	}
	fmt.Fprintf(&b, "  replay with  runner soak --in-process --events %d --faults %g --seed %d --parallel %d --batch %d\n", p.Events, p.Faults, p.Seed, p.Workers, p.Batch)
	if p.Workers > 1 {
		b.WriteString("               (same faults at the same decision points; with --parallel 1 a run replays exactly)\n")
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
