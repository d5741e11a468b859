package world

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/scenario"
	schema "github.com/outboxdrill/runner/sql"
	"github.com/outboxdrill/runner/steps"
)

// Isolation is one scenario's own world: a producer and a consumer database
// and a stream key. Database pairs are reused: after a scenario its rows are
// deleted and the pair serves the next one, which costs two short
// transactions instead of two CREATE DATABASE (~80–400 ms each here). The
// stream key is new for every scenario, so no entry, group or PEL carries over.
type Isolation struct {
	// Env is what the scenario's steps get: its pools, its broker, its
	// process control (and a team's services).
	Env *steps.Env
	// Producer and Consumer are its databases' names, StreamKey the name
	// of its broker objects.
	Producer, Consumer string
	StreamKey          string
	pools              [2]*pgxpool.Pool
	set                int      // its servers' set (World.setOf)
	pgGen              int64    // the set's pgGen its pools' connections belong to
	close              cleanups // pools: always
	drop               cleanups // databases: unless kept
	own                bool     // a system scenario's pair: never pooled
	// reuse is, per side of a system scenario's pair, its reuseKey when
	// its database may stand for a new one once reset (reuse.go); given,
	// that it was given back (its drop is then not run).
	reuse [2]string
	given [2]bool
	// lent are the pools Recycle lends giveBack, to go back with their
	// databases: the close chain leaves them open.
	lent [2]*pgxpool.Pool
}

// OpenSlot creates the scenario's logical replication slot on its
// producer database, before any step ran (as a connector is set up before
// the application writes), named after the database: its CDC relay reads
// from it (Env.CDC). The runner's gate made sure the server can give one
// (World.WalLevel).
func (iso *Isolation) OpenSlot(ctx context.Context) error {
	slot := &cdc.Slot{Name: iso.Producer, DB: iso.Env.Producer}
	if err := slot.Drop(ctx); err != nil { // a slot of a killed run on this pair's name
		return err
	}
	if err := slot.Create(ctx); err != nil {
		return err
	}
	iso.Env.CDC = slot
	return nil
}

// srv is the index of side's server (World.pgURLs).
func (iso *Isolation) srv(side int) int { return iso.set*2 + side }

// release closes the pools and, unless keep, drops the databases.
func (iso *Isolation) release(keep bool) error {
	err := iso.close.run()
	if !keep {
		err = errors.Join(err, iso.drop.run())
	}
	return err
}

// pairPool holds the run's database pairs. A scenario takes a free pair; when
// none comes back within growAfter it asks for one more (up to one pair per
// parallel worker, created one at a time in the background) and takes
// whichever comes first: a new pair or one another scenario gives back. So a
// run of short scenarios waits for CREATE DATABASE once, and long ones still
// get a pair each.
type pairPool struct {
	set     int // whose servers
	mu      sync.Mutex
	seq     *atomic.Int64 // the World's: names databases and streams
	pairs   int           // created or being created, not kept
	max     int
	free    chan *Isolation
	failed  chan error
	bg      context.Context // creations; cancelled at shutdown
	cancel  context.CancelFunc
	pending sync.WaitGroup
	// creating serialises creations: CREATE DATABASE is bound by the disk's
	// fsyncs, so concurrent ones only delay the first pair, which a waiting
	// scenario needs most (measured: 0.44 s alone, 1.1 s with three others).
	creating sync.Mutex
}

func (pp *pairPool) init(parallel int, seq *atomic.Int64) {
	pp.seq = seq
	pp.max = max(1, parallel)
	pp.free = make(chan *Isolation, pp.max)
	pp.failed = make(chan error, pp.max)
	pp.bg, pp.cancel = context.WithCancel(context.Background())
}

func (pp *pairPool) next() int { return int(pp.seq.Add(1)) }

// acquire hands out a reset database pair with a new stream (or queues) on
// broker b for scenario sc.
func (w *World) Acquire(ctx context.Context, b string, sc *scenario.Scenario) (*Isolation, error) {
	if err := w.BrokerUp(ctx, b); err != nil {
		return nil, err
	}
	pp := &w.pairs[w.setOf(sc)]
	iso, err := pp.take(ctx, growAfter)
	if iso == nil && err == nil {
		pp.mu.Lock()
		grow := pp.pairs < pp.max
		if grow {
			pp.pairs++
		}
		pp.mu.Unlock()
		if grow {
			pp.pending.Go(func() { w.createPair(pp, pp.next()) })
		}
		iso, err = pp.take(ctx, -1)
	}
	if err != nil {
		return nil, err
	}
	n := pp.next()
	iso.StreamKey = fmt.Sprintf("%s:%s:%d", namePrefix, w.RunID, n)
	if g := w.pgGen[iso.set].Load(); iso.pgGen != g {
		// A PostgreSQL server was restarted since this pair last ran: its
		// pooled connections are to the dead process.
		iso.pools[0].Reset()
		iso.pools[1].Reset()
		iso.pgGen = g
	}
	br, err := w.newBroker(ctx, b, iso.StreamKey, sc)
	if err != nil {
		pp.free <- iso // the pair is untouched
		return nil, &BrokerError{fmt.Errorf("%s: %w", b, err)}
	}
	iso.Env = steps.NewEnv(iso.pools[0], iso.pools[1], br)
	iso.Env.BrokerName, iso.Env.Control = b, control{w, b, iso.set}
	if sc != nil { // soak and bench acquire a pair without a scenario
		iso.Env.Consumers = sc.Consumers()
	}
	return iso, nil
}

// growAfter is how long a scenario waits for a pair to come back before it
// asks for a new one: short scenarios give theirs back sooner than a CREATE
// DATABASE takes (~10 ms against ~0.5 s here), and a creation nobody needs
// only slows the disk for everyone.
const growAfter = 50 * time.Millisecond

// take waits up to wait (forever if negative) for a free pair; nil, nil when
// none came. With no pair at all it does not wait.
func (pp *pairPool) take(ctx context.Context, wait time.Duration) (*Isolation, error) {
	select {
	case iso := <-pp.free:
		return iso, nil
	default:
	}
	pp.mu.Lock()
	none := pp.pairs == 0
	pp.mu.Unlock()
	if wait >= 0 && none {
		return nil, nil
	}
	var timeout <-chan time.Time
	if wait >= 0 {
		timeout = time.After(wait)
	}
	select {
	case iso := <-pp.free:
		return iso, nil
	case err := <-pp.failed:
		return nil, err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-timeout:
		return nil, nil
	}
}

// createPair makes a database pair with both schemas and offers it to the
// pool. Each undo is registered as it goes, so a failure half-way releases
// exactly what exists.
func (w *World) createPair(pp *pairPool, n int) {
	pp.creating.Lock()
	defer pp.creating.Unlock()
	base := fmt.Sprintf("%s_%s_%d", namePrefix, w.RunID, n)
	iso := &Isolation{Producer: base + "_p", Consumer: base + "_c", set: pp.set}
	// Both sides at once: a scenario needs the two, and each is mostly
	// round trips and the server's work on its own files.
	var errs [2]error
	var wg sync.WaitGroup
	for i, db := range []struct{ name, ddl string }{{iso.Producer, schema.Producer}, {iso.Consumer, schema.Consumer}} {
		wg.Go(func() { errs[i] = w.createSide(pp.bg, iso, i, db.name, db.ddl) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		pp.mu.Lock()
		pp.pairs--
		pp.mu.Unlock()
		if pp.bg.Err() == nil { // not our own shutdown: a waiting scenario reports it
			select {
			case pp.failed <- err:
			default:
			}
		}
		_ = iso.release(false)
		return
	}
	pp.free <- iso
}

// createSide creates one side's database of iso with its schema,
// registering each undo as it goes.
func (w *World) createSide(ctx context.Context, iso *Isolation, side int, name, ddl string) error {
	err := w.createDB(ctx, iso.srv(side), name, &iso.drop) // cleanups may be added to at once
	if err == nil {
		iso.pools[side], err = w.pool(ctx, iso.srv(side), name)
	}
	if err != nil {
		return fmt.Errorf("database %s: %w", name, err)
	}
	pool := iso.pools[side]
	iso.close.add(func(context.Context) error { pool.Close(); return nil })
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("database %s: %w", name, err)
	}
	return nil
}

// recycle ends a scenario's use of iso. Kept: the databases and stream stay
// as they are and the pair leaves the pool. Otherwise the stream is deleted,
// the rows too, and the pair goes back to the pool.
func (w *World) Recycle(ctx context.Context, iso *Isolation, keep bool) error {
	pp := &w.pairs[iso.set]
	if iso.own { // not the pool's: its stream goes, then the pair
		if keep {
			return iso.release(true)
		}
		ctx = context.WithoutCancel(ctx)
		err := iso.Env.Broker.Delete(ctx)
		for side, key := range iso.reuse {
			if key != "" {
				iso.lent[side] = iso.pools[side]
			}
		}
		err = errors.Join(err, iso.close.run()) // the services stop, the pools not lent close
		// The reset (or drop) runs beside the next scenarios: a database
		// goes back to the free list only once it is reset.
		w.sysdb.resets.Go(func() {
			w.giveBack(ctx, iso)
			w.sysdb.failed(iso.drop.run())
		})
		return err
	}
	if keep {
		pp.mu.Lock()
		pp.pairs--
		pp.mu.Unlock()
		return iso.release(true)
	}
	ctx = context.WithoutCancel(ctx)  // cleanup runs after Ctrl-C too
	err := iso.Env.Broker.Delete(ctx) // the stream, its groups, its dead letters
	if err == nil {
		_, err = iso.pools[0].Exec(ctx, schema.ResetProducer)
	}
	if err == nil {
		_, err = iso.pools[1].Exec(ctx, schema.ResetConsumer)
	}
	if err != nil {
		pp.mu.Lock()
		pp.pairs--
		pp.mu.Unlock()
		return errors.Join(err, iso.release(false))
	}
	pp.free <- iso
	return nil
}

// shutdown stops creations in flight and drops every pooled pair.
func (pp *pairPool) shutdown(context.Context) error {
	if pp.cancel == nil {
		return nil
	}
	pp.cancel()
	pp.pending.Wait()
	var errs []error
	for {
		select {
		case iso := <-pp.free:
			errs = append(errs, iso.release(false))
		default:
			return errors.Join(errs...)
		}
	}
}

// BrokerError is a scenario's broker that could not be set up: that
// scenario fails on that broker; the run goes on.
type BrokerError struct{ err error }

func (e *BrokerError) Error() string { return e.err.Error() }
func (e *BrokerError) Unwrap() error { return e.err }

// Pair is a database pair and a broker stream of the run, taken from the
// run's pool as a scenario's would be: for tools that drive the pipeline
// themselves (soak, bench). Give it back with ReturnPair.
type Pair struct {
	// Env holds the producer's and the consumer's pools and the broker.
	Env *steps.Env
	// Stream is the broker's stream key (Redis) or the scenario key.
	Stream string
	iso    *Isolation
}

// TakePair hands out a reset database pair with a new stream on broker b.
func (w *World) TakePair(ctx context.Context, b string) (*Pair, error) {
	iso, err := w.Acquire(ctx, b, nil)
	if err != nil {
		return nil, err
	}
	return &Pair{Env: iso.Env, Stream: iso.StreamKey, iso: iso}, nil
}

// ReturnPair resets the pair for the next user.
func (w *World) ReturnPair(ctx context.Context, p *Pair) error { return w.Recycle(ctx, p.iso, false) }

// RedisClient is the run's Redis client, or nil when Redis is not one of
// its brokers.
func (w *World) RedisClient() *redis.Client { return w.redisClient() }

// DiscardPair ends the use of a pair that nobody takes next: its broker
// stream is deleted and its databases dropped (on the runner's own server,
// left to go with the server), without the row-by-row reset ReturnPair pays
// for the next user (~95 s after a 20,000-event soak). The pool may create a
// new pair in its place.
func (w *World) DiscardPair(ctx context.Context, p *Pair) error { return w.Discard(ctx, p.iso) }

// BrokerURL is broker b's server URL, given or the runner's own ("" when
// b is not one of the world's brokers).
func (w *World) BrokerURL(b string) string { return w.brokerURL(b) }

// Discard ends a scenario's use of a pair nobody takes next: its broker
// stream is deleted and its databases dropped (on the runner's own server,
// left to go with the server). The pool may create a new pair in its place.
func (w *World) Discard(ctx context.Context, iso *Isolation) error {
	if !iso.own {
		pp := &w.pairs[iso.set]
		pp.mu.Lock()
		pp.pairs--
		pp.mu.Unlock()
	}
	err := iso.Env.Broker.Delete(context.WithoutCancel(ctx))
	return errors.Join(err, iso.release(false))
}
