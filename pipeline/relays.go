package pipeline

import (
	"context"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Lease is how concurrent relays keep each other off the same rows.
type Lease string

const (
	// SkipLocked: each relay locks the rows it reads (FOR UPDATE SKIP LOCKED)
	// until it has published and marked them; the others skip them.
	SkipLocked Lease = "skip_locked"
	// Flag: the anti-pattern — published=true is the only claim, so relays
	// that read before any of them marked publish the same rows.
	Flag Lease = "flag"
)

// RelayConcurrently runs workers relay passes at once. All of them read
// before any publishes (a barrier), which makes the race that real relays
// lose now and then happen every time: with Flag every worker publishes the
// same rows; with SkipLocked each row is published by exactly one.
func (r *Relay) RelayConcurrently(ctx context.Context, workers int, lease Lease, limit int) ([]RelayResult, error) {
	results := make([]RelayResult, workers)
	errs := make([]error, workers)
	var read sync.WaitGroup // the barrier: everyone has read
	read.Add(workers)
	var done sync.WaitGroup
	for w := range workers {
		done.Go(func() {
			if lease == SkipLocked {
				results[w], errs[w] = r.lockedPass(ctx, limit, &read)
			} else {
				results[w], errs[w] = r.flagPass(ctx, limit, &read)
			}
		})
	}
	done.Wait()
	return results, joinWorkers(errs)
}

// WorkerErrors are the errors of concurrent relay passes, one per failed
// pass, as errors.Join would join them; a caller can tell them apart.
type WorkerErrors []error

func (e WorkerErrors) Error() string   { return errors.Join(e...).Error() }
func (e WorkerErrors) Unwrap() []error { return e }

// joinWorkers is nil when no pass failed, else the passes' errors.
func joinWorkers(errs []error) error {
	var out WorkerErrors
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	if out == nil {
		return nil
	}
	return out
}

func (r *Relay) flagPass(ctx context.Context, limit int, read *sync.WaitGroup) (RelayResult, error) {
	ids, msgs, err := readUnpublished(ctx, r.DB, sqlUnpublished, limit)
	read.Done()
	read.Wait()
	if err != nil {
		return RelayResult{}, err
	}
	return r.publishAndMark(ctx, r.DB, ids, msgs, false)
}

// lockedPass holds its rows' locks in one transaction from the read to the
// mark. Whatever happens, it arrives at the barrier exactly once.
func (r *Relay) lockedPass(ctx context.Context, limit int, read *sync.WaitGroup) (res RelayResult, err error) {
	arrived := false
	err = pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
		ids, msgs, err := readUnpublished(ctx, tx, sqlUnpublishedLocked, limit)
		arrived = true
		read.Done()
		read.Wait() // the rows stay locked while the others read
		if err != nil {
			return err
		}
		res, err = r.publishAndMark(ctx, tx, ids, msgs, false)
		return err
	})
	if !arrived { // BEGIN failed: the others must not wait for this pass
		read.Done()
	}
	return res, err
}

var _ db = pgx.Tx(nil)
