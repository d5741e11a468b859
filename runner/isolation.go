package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"outboxdrill/broker/redisstream"
	schema "outboxdrill/sql"
	"outboxdrill/steps"
)

// isolation is one scenario's own world: a producer and a consumer database
// and a stream key. Database pairs are reused: after a scenario its rows are
// deleted and the pair serves the next one, which costs two short
// transactions instead of two CREATE DATABASE (~80–400 ms each here). The
// stream key is new for every scenario, so no entry, group or PEL carries over.
type isolation struct {
	env       *steps.Env
	producer  string // database names
	consumer  string
	pools     [2]*pgxpool.Pool
	streamKey string
	close     cleanups // pools: always
	drop      cleanups // databases: unless kept
}

// release closes the pools and, unless keep, drops the databases.
func (iso *isolation) release(keep bool) error {
	err := iso.close.run()
	if !keep {
		err = errors.Join(err, iso.drop.run())
	}
	return err
}

// acquire hands out a reset database pair, or creates one, with a new stream.
func (w *World) acquire(ctx context.Context) (*isolation, error) {
	w.mu.Lock()
	w.seq++
	n := w.seq
	var iso *isolation
	if k := len(w.free); k > 0 {
		iso, w.free = w.free[k-1], w.free[:k-1]
	}
	w.mu.Unlock()
	if iso == nil {
		base := fmt.Sprintf("%s_%s_%d", NamePrefix, w.RunID, n)
		iso = &isolation{producer: base + "_p", consumer: base + "_c"}
		if err := w.create(ctx, iso); err != nil {
			return nil, errors.Join(err, iso.release(false))
		}
	}
	iso.streamKey = fmt.Sprintf("%s:%s:%d", NamePrefix, w.RunID, n)
	iso.env = steps.NewEnv(iso.pools[0], iso.pools[1], redisstream.New(w.rdb, iso.streamKey))
	return iso, nil
}

// create makes iso's databases and pools, registering each undo as it goes
// so that a failure half-way releases exactly what exists.
func (w *World) create(ctx context.Context, iso *isolation) error {
	for i, name := range []string{iso.producer, iso.consumer} {
		if err := w.createDB(ctx, name, w.template(name[len(name)-1:]), &iso.drop); err != nil {
			return err
		}
		pool, err := w.pool(ctx, name)
		if err != nil {
			return err
		}
		iso.pools[i] = pool
		iso.close.add(func(context.Context) error { pool.Close(); return nil })
	}
	return nil
}

// recycle ends a scenario's use of iso. Kept: the databases and stream stay
// as they are and the pair leaves the pool. Otherwise the stream is deleted,
// the rows too, and the pair goes back to the pool.
func (w *World) recycle(ctx context.Context, iso *isolation, keep bool) error {
	if keep {
		return iso.release(true)
	}
	ctx = context.WithoutCancel(ctx) // cleanup runs after Ctrl-C too
	err := w.rdb.Del(ctx, iso.streamKey).Err()
	if err == nil {
		_, err = iso.pools[0].Exec(ctx, schema.ResetProducer)
	}
	if err == nil {
		_, err = iso.pools[1].Exec(ctx, schema.ResetConsumer)
	}
	if err != nil {
		return errors.Join(err, iso.release(false))
	}
	w.mu.Lock()
	w.free = append(w.free, iso)
	w.mu.Unlock()
	return nil
}

// releaseFree drops the pooled database pairs at the end of the run.
func (w *World) releaseFree(context.Context) error {
	w.mu.Lock()
	free := w.free
	w.free = nil
	w.mu.Unlock()
	var errs []error
	for _, iso := range free {
		errs = append(errs, iso.release(false))
	}
	return errors.Join(errs...)
}
