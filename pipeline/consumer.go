package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/broker"
)

// Consumer applies broker entries to the consumer database through the inbox.
type Consumer struct {
	DB     *pgxpool.Pool
	Broker broker.Broker
}

// ConsumeOptions configures one consume or claim pass.
type ConsumeOptions struct {
	Consumer string // consumer id: the group and the inbox's dedupe scope
	// Projection is the read model the consumer updates; "" is the consumer
	// id. Two consumer ids on one read model is the renamed-consumer
	// anti-pattern: the new id's empty inbox applies the history again.
	Projection string
	Worker     string        // worker id: a process instance, never a dedupe key
	Count      int           // entries to take; <= 0 means all available
	Block      time.Duration // how long a read waits when nothing is new
	Idle       time.Duration // claim only: minimum idle time of a pending entry
	Auto       bool          // claim only: XAUTOCLAIM instead of XPENDING + XCLAIM
	// Anti-pattern modes, to show the damage they do:
	// AckFirst XACKs an entry before its transaction runs; SplitTx commits the
	// inbox row and the projection in two transactions (a fault strikes
	// between them); DedupeByEntry keys the inbox by broker entry id instead
	// of business event id.
	AckFirst, SplitTx, DedupeByEntry bool
	// Seen, when set, is the anti-pattern of deduplicating in another store
	// (Redis SETNX) before the PostgreSQL transaction, which then only
	// updates the projection: a failure between the two loses the effect.
	Seen SeenStore
	// Strict applies the events of one aggregate in version order: an event
	// whose predecessor has not been applied is held back (Deferred, not
	// acked) until it is delivered again after the gap has closed.
	Strict bool
	// MaxDeliveries, when > 0, moves an entry that failed or conflicted on
	// its MaxDeliveries-th delivery to the dead-letter stream and acks it, so
	// that a poison message stops coming back.
	MaxDeliveries int
	Fault         Fault // DivZero: fail inside the transaction, after the inbox insert
	// FailEvent, when set, confines Fault to the deliveries of this business
	// event id: a poison message among healthy ones.
	FailEvent string
	// SkipAck is the fault "commit, then crash before XACK": no ack and no
	// nack follow, and the worker's client-side state goes (Broker.Crash).
	SkipAck bool
	// KeepFailed leaves a failed or held-back entry with the worker instead
	// of giving it back for redelivery now (Broker.Nack).
	KeepFailed bool
	// BrokerTxn reads, emits each applied event to the broker's output and
	// acknowledges in ONE broker transaction (broker.Transactions: Kafka's
	// read-process-write); each consumer transaction runs inside it, and
	// commits on its own. A failure aborts the broker transaction;
	// SkipAck is the worker dying before the broker transaction commits.
	BrokerTxn bool
}

// ReadModel is the read model the consumer writes: the projection table key
// (Projection, else the consumer id).
func (o ConsumeOptions) ReadModel() string {
	if o.Projection != "" {
		return o.Projection
	}
	return o.Consumer
}

// Outcome is what handling one delivery did.
type Outcome string

const (
	Applied   Outcome = "applied"   // new in the inbox; projection updated
	Duplicate Outcome = "duplicate" // same id and payload already in the inbox; no effect
	Conflict  Outcome = "conflict"  // same id, different payload: identity conflict, no effect, not acked
	Failed    Outcome = "failed"    // the transaction rolled back; the entry stays pending
	Deferred  Outcome = "deferred"  // strict ordering: its predecessor is missing; no effect, not acked
)

// Handled is one delivery and what became of it.
type Handled struct {
	broker.Delivery
	Outcome      Outcome
	Acked        bool
	Nacked       bool   // given back to the broker for redelivery now
	DeadLettered bool   // moved to the dead-letter stream (then acked)
	Reason       string // for Conflict and Failed
}

// ConsumeResult lists every delivery of one pass in order.
type ConsumeResult struct {
	Handled []Handled
	// Notes are what the broker said of a broker transaction: what it
	// made the worker wait for, how the transaction ended.
	Notes []string
}

// Count counts deliveries with outcome o.
func (r ConsumeResult) Count(o Outcome) int {
	return r.countIf(func(h Handled) bool { return h.Outcome == o })
}

// DeadLettered counts deliveries moved to the dead-letter stream.
func (r ConsumeResult) DeadLettered() int {
	return r.countIf(func(h Handled) bool { return h.DeadLettered })
}

// Redelivered counts deliveries the broker had made before.
func (r ConsumeResult) Redelivered() int {
	return r.countIf(func(h Handled) bool { return h.Deliveries > 1 })
}

// Acked counts acknowledged deliveries.
func (r ConsumeResult) Acked() int { return r.countIf(func(h Handled) bool { return h.Acked }) }

func (r ConsumeResult) countIf(pred func(Handled) bool) int {
	n := 0
	for _, h := range r.Handled {
		if pred(h) {
			n++
		}
	}
	return n
}

// ErrClash is what Validate (and so Consume and Claim) returns for options
// that cannot all hold: errors.Is(err, ErrClash), and errors.As a *Clash
// for which two.
var ErrClash = errors.New("consume options clash")

// Clash is two options that cannot both hold, named as ConsumeOptions
// fields.
type Clash struct{ A, B, Why string }

func (c *Clash) Error() string {
	return fmt.Sprintf("%v: %s and %s cannot both hold: %s", ErrClash, c.A, c.B, c.Why)
}

func (c *Clash) Is(target error) bool { return target == ErrClash }

// Validate rejects options that cannot all hold. handle would otherwise
// pick one of them (strict, then setnx, then split_tx) and silently ignore
// the other, and an ignored fault or mode is a wrong verdict. The scenario
// language reports the same clashes at load time (steps.Handling).
func (o ConsumeOptions) Validate() error {
	for _, c := range []struct {
		Clash
		both bool
	}{
		{Clash{"Strict", "SplitTx", "strict ordering applies the event, its aggregate version and the projection in ONE transaction; a split transaction needs two"}, o.Strict && o.SplitTx},
		{Clash{"Strict", "Seen", "strict ordering dedupes in the inbox inside its transaction; a side store dedupes before it"}, o.Strict && o.Seen != nil},
		{Clash{"Seen", "SplitTx", "a side store dedupes with a key outside the database: there is no inbox transaction left to split"}, o.Seen != nil && o.SplitTx},
		{Clash{"AckFirst", "SkipAck", "acking first acks before the transaction: there is no ack after the commit to skip"}, o.AckFirst && o.SkipAck},
		{Clash{"AckFirst", "MaxDeliveries", "acking first acks every entry on delivery: none comes back to count deliveries of"}, o.AckFirst && o.MaxDeliveries > 0},
		{Clash{"BrokerTxn", "AckFirst", "a broker transaction acknowledges when it commits, after the consumer transactions"}, o.BrokerTxn && o.AckFirst},
		{Clash{"BrokerTxn", "MaxDeliveries", "a failure aborts the whole broker transaction: nothing is set aside inside it"}, o.BrokerTxn && o.MaxDeliveries > 0},
		{Clash{"BrokerTxn", "Strict", "a held-back event would abort the broker transaction it arrived in"}, o.BrokerTxn && o.Strict},
	} {
		if c.both {
			return &c.Clash
		}
	}
	return nil
}

// Consume reads new entries (">") and handles each.
func (c *Consumer) Consume(ctx context.Context, opt ConsumeOptions) (ConsumeResult, error) {
	if err := opt.Validate(); err != nil {
		return ConsumeResult{}, err // before reading: nothing is delivered
	}
	if opt.BrokerTxn {
		return c.consumeInTxn(ctx, opt)
	}
	ds, err := c.Broker.Read(ctx, opt.Consumer, opt.Worker, opt.Count, opt.Block)
	if err != nil {
		return ConsumeResult{}, err
	}
	return c.handleAll(ctx, opt, ds)
}

// consumeInTxn is Kafka's exactly-once read-process-write: read, then per
// entry the consumer transaction (committed in PostgreSQL at once) and an
// output record, then ONE broker commit of the outputs and the group's
// position. The broker transaction does not cover PostgreSQL: a worker that
// dies before the broker commit leaves its effects applied and its entries
// to be delivered again, and only the inbox stops a second effect.
func (c *Consumer) consumeInTxn(ctx context.Context, opt ConsumeOptions) (ConsumeResult, error) {
	tb, ok := c.Broker.(broker.Transactions)
	if !ok {
		return ConsumeResult{}, errors.New("this broker has no transactions the runner can drive (broker_txn)")
	}
	txn, ds, err := tb.ReadInTxn(ctx, opt.Consumer, opt.Worker, opt.Count, opt.Block)
	if err != nil {
		return ConsumeResult{}, err
	}
	res, failed, err := c.handleInTxn(ctx, opt, txn, ds)
	switch {
	case opt.SkipAck: // the worker dies before the broker commit
		err = errors.Join(err, txn.Crash(ctx))
	case err != nil || failed: // the worker aborts it all
		err = errors.Join(err, txn.Abort(context.WithoutCancel(ctx)))
	default:
		if err = txn.Commit(ctx); err == nil {
			for i := range res.Handled {
				res.Handled[i].Acked = true
			}
		}
	}
	res.Notes = txn.Notes()
	return res, err
}

// handleInTxn handles each delivery in its own consumer transaction and
// emits what it applied (or found a duplicate) to the broker transaction's
// output; failed says an entry did neither, which aborts the transaction.
func (c *Consumer) handleInTxn(ctx context.Context, opt ConsumeOptions, txn broker.Txn, ds []broker.Delivery) (res ConsumeResult, failed bool, err error) {
	for _, d := range ds {
		h, err := c.handle(ctx, opt, d)
		if err == nil && (h.Outcome == Applied || h.Outcome == Duplicate) {
			err = txn.Emit(ctx, d) // an output per input: a retried transaction emits again
		}
		if err != nil {
			return res, true, fmt.Errorf("entry %s (event %s): %w", d.ID, d.EventID, err)
		}
		failed = failed || h.Outcome != Applied && h.Outcome != Duplicate
		res.Handled = append(res.Handled, h)
	}
	return res, failed, nil
}

// Claim takes over pending entries idle for at least opt.Idle and handles each.
func (c *Consumer) Claim(ctx context.Context, opt ConsumeOptions) (ConsumeResult, error) {
	if err := opt.Validate(); err != nil {
		return ConsumeResult{}, err // before claiming: no entry changes hands
	}
	claim := c.Broker.Claim
	if opt.Auto {
		claim = c.Broker.AutoClaim
	}
	ds, err := claim(ctx, opt.Consumer, opt.Worker, opt.Idle, opt.Count)
	if err != nil {
		return ConsumeResult{}, err
	}
	return c.handleAll(ctx, opt, ds)
}

// ackErr splits an Ack's error: the ids the broker did not acknowledge
// (*broker.NotAcked: the others were) from a failure of the Ack itself.
func ackErr(err error) ([]string, error) {
	var na *broker.NotAcked
	if errors.As(err, &na) {
		return na.IDs, nil
	}
	return nil, err
}

func (c *Consumer) handleAll(ctx context.Context, opt ConsumeOptions, ds []broker.Delivery) (ConsumeResult, error) {
	var res ConsumeResult
	var ack, nack []int // indexes into res.Handled
	for i, d := range ds {
		ackedFirst := false
		if opt.AckFirst { // anti-pattern: the broker forgets the entry before the effect is durable
			unheld, err := ackErr(c.Broker.Ack(ctx, opt.Consumer, d.ID))
			if err != nil {
				return res, err
			}
			ackedFirst = len(unheld) == 0
		}
		h, err := c.handle(ctx, opt, d)
		if err != nil {
			err = fmt.Errorf("entry %s (event %s): %w", d.ID, d.EventID, err)
			nacked, gerr := c.giveUp(ctx, opt, ds, err)
			for k := range res.Handled { // committed, not acked yet: given back too
				res.Handled[k].Nacked = nacked && !res.Handled[k].Acked
			}
			// Read, and not handled: delivered all the same, and the
			// outcome says so (a pass that stopped at entry i read them).
			for j, rest := range ds[i:] {
				res.Handled = append(res.Handled, Handled{Delivery: rest, Outcome: Failed, Nacked: nacked,
					Acked: j == 0 && ackedFirst, Reason: "not handled: the pass gave up at " + d.ID})
			}
			return res, gerr
		}
		if opt.AckFirst {
			h.Acked = ackedFirst
			res.Handled = append(res.Handled, h)
			continue
		}
		// Commit, THEN XACK; an entry that failed or conflicts stays pending,
		// unless it has come back too often: then it is set aside.
		poison := (h.Outcome == Failed || h.Outcome == Conflict) && opt.MaxDeliveries > 0 && d.Deliveries >= opt.MaxDeliveries
		if poison {
			dl := broker.DeadLetter{EventID: d.EventID, Payload: d.Payload, Reason: string(h.Outcome) + ": " + h.Reason, EntryID: d.ID, Deliveries: d.Deliveries}
			if err := c.Broker.DeadLetter(ctx, dl); err != nil {
				return res, err
			}
			h.DeadLettered = true
		}
		switch {
		case opt.SkipAck:
		case h.Outcome == Applied || h.Outcome == Duplicate || poison:
			ack = append(ack, len(res.Handled))
		case (h.Outcome == Failed || h.Outcome == Deferred) && !opt.KeepFailed:
			nack = append(nack, len(res.Handled))
		}
		res.Handled = append(res.Handled, h)
	}
	if opt.SkipAck { // the worker died after its commits: nothing is acked
		return res, c.Broker.Crash(ctx, opt.Consumer, opt.Worker)
	}
	// One XACK for the pass, after every commit it covers: a crash before it
	// leaves committed entries pending, the window skip_ack names.
	unheld, err := ackErr(c.Broker.Ack(ctx, opt.Consumer, res.ids(ack)...))
	if err != nil {
		return res, err
	}
	for _, k := range ack {
		// The broker says which it did not acknowledge: those are not acked.
		res.Handled[k].Acked = !slices.Contains(unheld, res.Handled[k].ID)
	}
	if err := c.Broker.Nack(ctx, opt.Consumer, res.ids(nack)...); err != nil {
		return res, err
	}
	for _, k := range nack {
		res.Handled[k].Nacked = true
	}
	return res, nil
}

// giveUp ends a pass that failed mid-way (its database unreachable, say):
// nothing of the pass is acked, and, as a worker does on an error, its
// deliveries are nacked back (on Redis Streams they stay pending; on a
// broker that holds a delivery for its channel they would otherwise be
// stuck there until the worker died). With KeepFailed they stay held.
func (c *Consumer) giveUp(ctx context.Context, opt ConsumeOptions, ds []broker.Delivery, err error) (nacked bool, _ error) {
	if opt.KeepFailed || opt.AckFirst {
		return false, err
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	if nerr := c.Broker.Nack(context.WithoutCancel(ctx), opt.Consumer, ids...); nerr != nil {
		return false, errors.Join(err, fmt.Errorf("nack after the failure: %w", nerr))
	}
	return true, err
}

// ids are the entry ids of the handled deliveries at indexes ks.
func (r ConsumeResult) ids(ks []int) []string {
	ids := make([]string, len(ks))
	for i, k := range ks {
		ids[i] = r.Handled[k].ID
	}
	return ids
}

// The consumer transaction's statements.
const (
	sqlInbox = `INSERT INTO inbox (consumer_id, event_id, payload) VALUES ($1, $2, $3::jsonb)
ON CONFLICT (consumer_id, event_id) DO NOTHING`
	// jsonb equality: key order and spacing do not make a conflict.
	sqlSamePayload = `SELECT payload = $3::jsonb, payload::text FROM inbox WHERE consumer_id = $1 AND event_id = $2`
	// Without a fault to inject between them, the inbox insert and the
	// projection update are one statement: one round trip, one transaction,
	// and the projection moves only when the inbox row is new.
	sqlInboxAndProjection = `WITH ins AS (
    INSERT INTO inbox (consumer_id, event_id, payload) VALUES ($1, $2, $3::jsonb)
    ON CONFLICT (consumer_id, event_id) DO NOTHING
    RETURNING payload)
INSERT INTO projection (consumer_id, currency, amount, events)
SELECT $4, payload->>'currency', (payload->>'amount')::bigint, 1 FROM ins
ON CONFLICT (consumer_id, currency) DO UPDATE
SET amount = projection.amount + EXCLUDED.amount, events = projection.events + 1`
	sqlProjection = `INSERT INTO projection (consumer_id, currency, amount, events)
SELECT $1, p->>'currency', (p->>'amount')::bigint, 1 FROM (SELECT $2::jsonb AS p) AS e
ON CONFLICT (consumer_id, currency) DO UPDATE
SET amount = projection.amount + EXCLUDED.amount, events = projection.events + 1`
)

// handle runs ONE consumer transaction: insert into the inbox; if the row is
// new, update the projection; commit. Errors PostgreSQL raises about the data
// (and the injected fault) are outcomes; anything else is returned.
func (c *Consumer) handle(ctx context.Context, opt ConsumeOptions, d broker.Delivery) (Handled, error) {
	if opt.FailEvent != "" && d.EventID != opt.FailEvent {
		opt.Fault = NoFault // not the poison message: handled as healthy
	}
	switch {
	case opt.Strict:
		return c.handleStrict(ctx, opt, d)
	case opt.Seen != nil:
		return c.handleSeen(ctx, opt, d)
	case opt.SplitTx:
		return c.handleSplit(ctx, opt, d)
	case opt.Fault == NoFault:
		return c.handleFast(ctx, opt, d)
	}
	h := Handled{Delivery: d}
	err := pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
		isNew, err := c.insertInbox(ctx, tx, opt, d, &h)
		if err != nil || !isNew {
			return err
		}
		h.Outcome = Applied
		_, err = tx.Exec(ctx, sqlProjection, opt.ReadModel(), d.Payload)
		return err
	})
	if err != nil {
		return failed(Handled{Delivery: d}, err)
	}
	return h, nil
}

// insertInbox inserts the delivery into the inbox inside tx, then strikes
// the injected fault (after the insert: it must roll back too). A row that
// was there already classifies the delivery into *h (duplicate or
// conflict); isNew says the projection is to be applied.
func (c *Consumer) insertInbox(ctx context.Context, tx pgx.Tx, opt ConsumeOptions, d broker.Delivery, h *Handled) (isNew bool, err error) {
	tag, err := tx.Exec(ctx, sqlInbox, opt.Consumer, dedupeKey(opt, d), d.Payload)
	if err != nil {
		return false, err
	}
	if opt.Fault == DivZero {
		if _, err := tx.Exec(ctx, sqlDivZero); err != nil {
			return false, err
		}
	}
	if tag.RowsAffected() == 0 {
		*h, err = classify(ctx, tx, opt, d)
		return false, err
	}
	return true, nil
}

// handleFast is handle without an injected fault: the inbox insert and the
// projection update as one statement (its own transaction).
func (c *Consumer) handleFast(ctx context.Context, opt ConsumeOptions, d broker.Delivery) (Handled, error) {
	tag, err := c.DB.Exec(ctx, sqlInboxAndProjection, opt.Consumer, dedupeKey(opt, d), d.Payload, opt.ReadModel())
	if err != nil {
		return failed(Handled{Delivery: d}, err)
	}
	if tag.RowsAffected() == 1 {
		return Handled{Delivery: d, Outcome: Applied}, nil
	}
	h, err := classify(ctx, c.DB, opt, d)
	if err != nil {
		return failed(h, err)
	}
	return h, nil
}

// handleSplit is the anti-pattern of two transactions: the inbox row
// commits first; the projection (and an injected fault) come in a second.
// A failure between them leaves the event "seen" but never applied.
func (c *Consumer) handleSplit(ctx context.Context, opt ConsumeOptions, d broker.Delivery) (Handled, error) {
	h := Handled{Delivery: d}
	tag, err := c.DB.Exec(ctx, sqlInbox, opt.Consumer, dedupeKey(opt, d), d.Payload)
	if err != nil {
		return failed(h, err)
	}
	if tag.RowsAffected() == 0 {
		if h, err = classify(ctx, c.DB, opt, d); err != nil {
			return failed(h, err)
		}
		return h, nil
	}
	return c.projectAlone(ctx, opt, h)
}

// projectAlone updates the projection in a transaction of its own, with the
// injected fault inside it: the second half of the two anti-patterns that
// record "seen" somewhere first (split_tx, setnx).
func (c *Consumer) projectAlone(ctx context.Context, opt ConsumeOptions, h Handled) (Handled, error) {
	err := pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
		if opt.Fault == DivZero {
			if _, err := tx.Exec(ctx, sqlDivZero); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, sqlProjection, opt.ReadModel(), h.Payload)
		return err
	})
	if err != nil {
		return failed(h, err)
	}
	h.Outcome = Applied
	return h, nil
}

// dedupeKey is what the inbox dedupes on: the business event id, or in the
// anti-pattern the broker entry id (new on every publish).
func dedupeKey(opt ConsumeOptions, d broker.Delivery) string {
	if opt.DedupeByEntry {
		return d.ID
	}
	return d.EventID
}

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// classify names a delivery whose event is already in the inbox: the same
// payload (as jsonb) is a duplicate, another is an identity conflict.
func classify(ctx context.Context, q querier, opt ConsumeOptions, d broker.Delivery) (Handled, error) {
	h := Handled{Delivery: d, Outcome: Duplicate}
	var same bool
	var stored string
	if err := q.QueryRow(ctx, sqlSamePayload, opt.Consumer, dedupeKey(opt, d), d.Payload).Scan(&same, &stored); err != nil {
		return h, err
	}
	if !same {
		h.Outcome = Conflict
		h.Reason = fmt.Sprintf("identity conflict: event %s is in the inbox of %s with payload %s, this delivery carries %s",
			d.EventID, opt.Consumer, stored, d.Payload)
	}
	return h, nil
}

// failed turns an error PostgreSQL raised about the data (or the injected
// fault) into the Failed outcome; any other error is returned.
func failed(h Handled, err error) (Handled, error) {
	if IsDivZero(err) || isDataError(err) {
		h.Outcome, h.Reason = Failed, err.Error()+": transaction rolled back"
		return h, nil
	}
	return h, err
}

// SeenStore remembers keys outside the consumer database (Redis SETNX).
type SeenStore interface {
	// MarkSeen records key; false when it was already recorded.
	MarkSeen(ctx context.Context, key string) (bool, error)
}

// handleSeen is the anti-pattern of a dedupe store beside the database: the
// key is recorded first, then the projection transaction runs (and an
// injected fault strikes in it). A redelivery after that failure finds the key
// and is taken for a duplicate.
func (c *Consumer) handleSeen(ctx context.Context, opt ConsumeOptions, d broker.Delivery) (Handled, error) {
	h := Handled{Delivery: d}
	first, err := opt.Seen.MarkSeen(ctx, opt.Consumer+"/"+dedupeKey(opt, d))
	if err != nil {
		return h, err
	}
	if !first {
		h.Outcome = Duplicate
		return h, nil
	}
	return c.projectAlone(ctx, opt, h)
}

// The strict-ordering statements.
const (
	sqlLastVersion = `SELECT coalesce((SELECT version FROM aggregate_versions
WHERE consumer_id = $1 AND aggregate = $2 FOR UPDATE), 0)`
	sqlSetVersion = `INSERT INTO aggregate_versions VALUES ($1, $2, $3)
ON CONFLICT (consumer_id, aggregate) DO UPDATE SET version = greatest(aggregate_versions.version, EXCLUDED.version)`
	sqlHold    = `INSERT INTO held VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`
	sqlRelease = `DELETE FROM held WHERE consumer_id = $1 AND event_id = $2`
)

// handleStrict handles a delivery in aggregate order. Events without an
// aggregate, and versions already applied (which the inbox turns into
// duplicates), take the usual path; the next version is applied and moves
// the aggregate on; a later one is held back.
func (c *Consumer) handleStrict(ctx context.Context, opt ConsumeOptions, d broker.Delivery) (Handled, error) {
	var ev struct {
		Aggregate string `json:"aggregate"`
		Version   int64  `json:"version"`
	}
	if json.Unmarshal([]byte(d.Payload), &ev) != nil || ev.Aggregate == "" {
		opt.Strict = false
		return c.handle(ctx, opt, d)
	}
	h := Handled{Delivery: d}
	var last int64
	var deferred bool
	err := pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sqlLastVersion, opt.Consumer, ev.Aggregate).Scan(&last); err != nil {
			return err
		}
		if ev.Version > last+1 {
			deferred = true
			_, err := tx.Exec(ctx, sqlHold, opt.Consumer, d.EventID, ev.Aggregate, ev.Version)
			return err
		}
		isNew, err := c.insertInbox(ctx, tx, opt, d, &h)
		if err != nil || !isNew {
			return err
		}
		h.Outcome = Applied
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{sqlProjection, []any{opt.ReadModel(), d.Payload}},
			{sqlSetVersion, []any{opt.Consumer, ev.Aggregate, ev.Version}},
			{sqlRelease, []any{opt.Consumer, d.EventID}},
		} {
			if _, err := tx.Exec(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return failed(Handled{Delivery: d}, err)
	}
	if deferred {
		h.Outcome = Deferred
		h.Reason = fmt.Sprintf("aggregate %s is at version %d; version %d waits for %d", ev.Aggregate, last, ev.Version, last+1)
	}
	return h, nil
}
