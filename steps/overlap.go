package steps

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/pipeline"
)

// OverlapParams are the parameters of the produce_overlapping step.
type OverlapParams struct {
	First  string        `param:"first" doc:"the event whose transaction opens first (its outbox row gets the lower id or sequence) and commits last; default the first of bus-1, bus-2, … not yet used"`
	Second string        `param:"second" doc:"the event whose transaction opens second (the higher id) and commits first; default the next unused bus-N"`
	Amount int64         `param:"amount" default:"100" min:"1" doc:"atomic units each of the two transfers moves"`
	Hold   time.Duration `param:"hold" default:"5s" doc:"how long, at most, the first transaction stays open after the second committed, waiting until the second event's outbox row is published (leaves the system file's outbox.unpublished): the window in which a relay that keeps a cursor (WHERE id > last published) moves past the first's lower id; 0 commits the first at once"`
}

func (p *OverlapParams) Validate() error {
	if p.First != "" && p.First == p.Second {
		return fmt.Errorf("first and second are both %q: the step commits two events", p.First)
	}
	if p.Hold < 0 {
		return fmt.Errorf("hold needs a duration of 0 or more")
	}
	return nil
}

func overlapDefs() []*Def {
	return []*Def{
		Define("produce_overlapping", "Commit two events from overlapping producer transactions in the reverse order of their ids, on two connections to the producer database: A inserts the first event (the lower id), B inserts the second, B commits, the second is published (up to hold), then A commits. A relay that reads WHERE id > the last id it published never publishes the first (watermill#311). Runs the system file's produce: statement.",
			[]Key{{"committed", "events committed (2)"}, {"published_between", "1 if the second event was published while the first's transaction was still open"}},
			runOverlap),
	}
}

// overlapEvent is one of the two transfers, by its scenario name.
type overlapEvent struct {
	name string
	t    pipeline.Transfer
}

func runOverlap(ctx context.Context, env *Env, p *OverlapParams) (Result, error) {
	if env.System == nil {
		return Result{}, fmt.Errorf("produce_overlapping runs the system file's produce: statement: the scenario needs a system file (system: path, or runner run --system FILE)")
	}
	first, err := env.overlapEvent(p.First, p.Amount)
	if err != nil {
		return Result{}, err
	}
	second, err := env.overlapEvent(p.Second, p.Amount)
	if err != nil {
		return Result{}, err
	}
	// Two transactions at once: two connections of the pool, for real,
	// so the database hands out the ids in opening order and makes the
	// rows visible in commit order.
	a, err := env.Producer.Begin(ctx)
	if err != nil {
		return Result{}, err
	}
	defer a.Rollback(context.WithoutCancel(ctx))
	if err := teamInsert(ctx, env, a, first.t); err != nil {
		return Result{}, err
	}
	if err := commitOne(ctx, env, second.t); isLockTimeout(err) {
		return env.serialized(ctx, a, first, second)
	} else if err != nil {
		return Result{}, err
	}
	waited, published, err := env.awaitPublished(ctx, second.t.EventID, p.Hold)
	if err != nil {
		return Result{}, err
	}
	if err := a.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("committing %s: %w", showEvent(first.name, first.t.EventID), err)
	}
	return env.overlapResult(first, second, waited, published)
}

// overlapEvent names and builds one of the two transfers.
func (e *Env) overlapEvent(name string, amount int64) (overlapEvent, error) {
	if name == "" {
		name = e.nextAutoID()
	}
	e.used[name] = true
	id, err := e.eventID(name)
	if err != nil {
		return overlapEvent{}, err
	}
	return overlapEvent{name, pipeline.Transfer{EventID: id, From: "alice", To: "bob", Amount: amount, Currency: "USD"}}, nil
}

// commitOne inserts and commits t in a transaction of its own, opened
// while the caller's is still open. A produce statement that locks what
// the open one wrote (a balance row, an aggregate's version) waits on it
// for ever: lock_timeout turns that wait into an error.
func commitOne(ctx context.Context, env *Env, t pipeline.Transfer) error {
	return pgx.BeginFunc(ctx, env.Producer, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
			return err
		}
		return teamInsert(ctx, env, tx, t)
	})
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// serialized commits the two events in id order when the team's produce
// statement serializes its transactions (the second waited on the
// first's locks): such a producer never commits out of id order, and the
// workload goes on, saying so, instead of failing on it.
func (e *Env) serialized(ctx context.Context, a pgx.Tx, first, second overlapEvent) (Result, error) {
	if err := a.Commit(ctx); err != nil {
		return Result{}, err
	}
	if err := commitOne(ctx, e, second.t); err != nil {
		return Result{}, err
	}
	r, err := e.overlapResult(second, first, 0, false)
	f, s := showEvent(first.name, first.t.EventID), showEvent(second.name, second.t.EventID)
	r.Details = []string{fmt.Sprintf("%s's transaction waited 2s on %s's locks: the system file's produce statement serializes producers; committed %s, then %s, in id order", s, f, f, s)}
	return r, err
}

// awaitPublished waits, at most hold, until event id's outbox row is no
// longer unpublished: the relay has moved past it.
func (e *Env) awaitPublished(ctx context.Context, id string, hold time.Duration) (time.Duration, bool, error) {
	q := e.Mapping().UnpublishedEvent()
	start := time.Now()
	deadline := start.Add(hold)
	for {
		var n int64
		if err := e.Producer.QueryRow(ctx, q, id).Scan(&n); err != nil {
			return 0, false, fmt.Errorf("reading whether %s is published: %w", id, err)
		}
		if n == 0 || !time.Now().Before(deadline) {
			return time.Since(start), n == 0, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, context.Cause(ctx)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// overlapResult reports the two commits in commit order: the second event
// first, as the database made them visible.
func (e *Env) overlapResult(first, second overlapEvent, waited time.Duration, published bool) (Result, error) {
	r := Result{Outcome: map[string]int64{"committed": 2, "published_between": b2i(published)}}
	for _, ev := range []overlapEvent{second, first} {
		payload, err := e.payload(ev.t)
		if err != nil {
			return Result{}, err
		}
		e.transfers[ev.name] = ev.t
		r.Entries = append(r.Entries, Entry{EventID: ev.t.EventID, Outcome: "committed", Payload: payload})
	}
	e.last = first.name
	f, s := showEvent(first.name, first.t.EventID), showEvent(second.name, second.t.EventID)
	r.Details = append(r.Details, fmt.Sprintf("opened %s's transaction (the lower id), then committed %s (the higher id)", f, s))
	if published {
		r.Details = append(r.Details, fmt.Sprintf("%s published after %s; committed %s", s, waited.Round(time.Millisecond), f))
	} else {
		r.Details = append(r.Details, fmt.Sprintf("%s still unpublished after %s; committed %s anyway", s, waited.Round(time.Millisecond), f))
	}
	return r, nil
}

func (*OverlapParams) FaultSite() Participant { return ProducerDB }

// Draw notes the two commits in their order.
func (*OverlapParams) Draw(d Diagram, r Result) {
	for _, line := range r.Details {
		d.Note(line, ProducerDB)
	}
}
