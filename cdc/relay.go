package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/broker"
)

// RelayOptions are the fault points of one relay pass, each at the boundary
// it names, and how the pass holds its replication connection.
type RelayOptions struct {
	// SkipConfirm: publish, then crash before confirming the LSN. The next
	// pass starts from the old confirmed LSN and publishes again.
	SkipConfirm bool
	// SkipPublish: crash before publishing what was decoded. With
	// ConfirmFirst the LSN was confirmed already: the events are lost.
	SkipPublish bool
	// ConfirmFirst is the anti-pattern: confirm a transaction's LSN, then
	// publish its events.
	ConfirmFirst bool
	// Keep streams on the replication connection an earlier Keep pass left
	// open (opening one on the first) and leaves it open, as a running
	// connector does: a pass relays what arrived since the last confirm.
	// Without it a pass connects and disconnects, a relay started afresh
	// (and a connection kept by an earlier pass is closed first: one slot
	// has one reader). A fault ends either as a crash: the connection
	// closes, nothing more is confirmed.
	Keep bool
}

// Published is one event the pass published.
type Published struct{ EventID, EntryID, Payload string }

// RelayResult is what one pass did.
type RelayResult struct {
	Decoded   int // outbox events read from the slot
	Published []Published
	Confirmed pglogrepl.LSN // the last LSN confirmed to the slot (0: none)
	Settled   int           // events whose transaction's LSN was confirmed
	Crashed   bool          // a fault ended the pass
	Opened    bool          // the pass opened its replication connection
}

// catchUpTimeout bounds one pass: the slot is read up to the WAL position
// flushed when the pass began.
const catchUpTimeout = 10 * time.Second

// Relay runs one pass: it streams from the slot up to the WAL flushed when
// the pass began, publishes each committed transaction's outbox events and
// confirms its commit LSN after the broker accepted them. Without
// opt.Keep it connects for replication first and disconnects after, as a
// relay process started for the pass would. A fault ends the pass as a
// crash: the connection closes, nothing more is confirmed.
func (s *Slot) Relay(ctx context.Context, b broker.Broker, opt RelayOptions) (RelayResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if opt.Keep {
		return s.relayKept(ctx, b, opt)
	}
	if err := s.disconnect(ctx, 0); err != nil {
		return RelayResult{}, err
	}
	return s.relayOnce(ctx, b, opt)
}

// relayOnce is a pass on a connection of its own.
func (s *Slot) relayOnce(ctx context.Context, b broker.Broker, opt RelayOptions) (RelayResult, error) {
	var res RelayResult
	start, err := s.Stats(ctx)
	if err != nil {
		return res, err
	}
	if !start.Exists {
		return res, fmt.Errorf("replication slot %s does not exist", s.Name)
	}
	target, err := s.flushed(ctx)
	if err != nil {
		return res, err
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return res, err
	}
	res.Opened = true
	p := pass{conn: conn, b: b, opt: opt, res: &res, held: start.Confirmed, dec: &decoder{}}
	err = startReplication(ctx, conn, s.Name)
	if err == nil {
		err = p.follow(ctx, s.Name, target)
	}
	if err == nil && res.Confirmed > 0 {
		// Closed right after the confirm was sent, the connection may end
		// the walsender before it read the confirm (seen once in ~20
		// matrix runs: the slot stayed behind). It has read it once it
		// answers, and applied it once the slot shows it. A pass that
		// crashed after its confirm (confirm_first) waits too: the confirm
		// was on the wire, and the drill shows it applied.
		err = p.awaitReply(ctx)
		if err == nil {
			err = s.awaitSlot(ctx, res.Confirmed, false)
		}
	}
	conn.Close(context.WithoutCancel(ctx))
	if werr := s.awaitSlot(context.WithoutCancel(ctx), res.Confirmed, true); err == nil {
		err = werr
	}
	return res, err
}

// flushed is the WAL position flushed now: a pass relays up to it.
func (s *Slot) flushed(ctx context.Context) (pglogrepl.LSN, error) {
	var flushed string
	if err := s.DB.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&flushed); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(flushed)
}

// connect opens a replication connection to the producer database.
func (s *Slot) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg := s.DB.Config().ConnConfig.Config.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("replication connection: %w", err)
	}
	return conn, nil
}

// startReplication asks the server to stream from the slot's confirmed LSN.
func startReplication(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	})
	if err != nil {
		return fmt.Errorf("start replication from slot %s: %w", slot, err)
	}
	return nil
}

// awaitSlot waits until the slot holds the confirmed LSN (the server applies
// a standby status update after it arrives) and, with released, until the
// server has let go of it: the next pass, a peek or a drop then sees where
// this pass left it. The server tells neither: its view is polled.
func (s *Slot) awaitSlot(ctx context.Context, confirmed pglogrepl.LSN, released bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for pause := 500 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		st, err := s.Stats(ctx)
		if err != nil {
			return err
		}
		if !st.Exists || (!released || !st.Active) && st.Confirmed >= confirmed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replication slot %s: confirmed %s (want %s), active %v, 5s after the relay's pass", s.Name, st.Confirmed, confirmed, st.Active)
		}
		time.Sleep(pause)
	}
}

// pass is one relay pass on an open replication connection.
type pass struct {
	conn  *pgconn.PgConn
	b     broker.Broker
	opt   RelayOptions
	res   *RelayResult
	held  pglogrepl.LSN // what the slot had confirmed before the pass: sent back unchanged when asking
	dec   *decoder      // a kept connection's: the server sends a relation once per connection
	batch []Event       // decoded, committed, not yet published
}

// batchMax bounds how many events one publish carries.
const batchMax = 1000

// follow reads until the server has sent everything up to target. The
// events of transactions that arrive back to back are published together
// and confirmed with the last one's commit LSN (as Debezium batches): the
// confirm still follows the broker's ack of every event it covers.
func (p *pass) follow(ctx context.Context, slot string, target pglogrepl.LSN) error {
	if err := p.status(ctx, p.position(), true); err != nil { // where is the server? it answers at once
		return err
	}
	deadline := time.Now().Add(catchUpTimeout)
	for {
		wait := 50 * time.Millisecond
		if len(p.batch) > 0 {
			wait = time.Millisecond // nothing more right now: publish what is there
		}
		msg, err := p.receive(ctx, wait)
		if pgconn.Timeout(err) && ctx.Err() == nil {
			if len(p.batch) > 0 {
				if err := p.flush(ctx); err != nil || p.res.Crashed {
					return err
				}
			} else if time.Now().After(deadline) {
				return fmt.Errorf("replication slot %s: not caught up with %s within %s", slot, target, catchUpTimeout)
			}
			if err := p.status(ctx, p.position(), true); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("replication from slot %s: %w", slot, err)
		}
		done, err := p.handle(ctx, msg, target)
		if err != nil || p.res.Crashed {
			return err
		}
		if done {
			return p.flush(ctx)
		}
	}
}

// receive waits up to wait for the next message. The wait is a read
// deadline on the socket rather than a context: a context per message
// costs pgconn a watcher goroutine and a timer, a third of a backlog's
// time. ctx still ends the wait, checked before it (waits are short).
func (p *pass) receive(ctx context.Context, wait time.Duration) (pgproto3.BackendMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.conn.Conn().SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, err
	}
	return p.conn.ReceiveMessage(context.Background())
}

// handle takes one message; done once the server has sent up to target
// and no transaction is half decoded.
func (p *pass) handle(ctx context.Context, msg pgproto3.BackendMessage, target pglogrepl.LSN) (bool, error) {
	cd, ok := msg.(*pgproto3.CopyData)
	if !ok {
		if e, isErr := msg.(*pgproto3.ErrorResponse); isErr {
			return false, fmt.Errorf("replication: %s (SQLSTATE %s)", e.Message, e.Code)
		}
		return false, nil
	}
	switch cd.Data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
		if err != nil {
			return false, err
		}
		return k.ServerWALEnd >= target && len(p.dec.open) == 0, nil
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			return false, err
		}
		evs, err := p.dec.feed(x.WALData)
		if err != nil || len(evs) == 0 {
			return false, err
		}
		p.batch = append(p.batch, evs...)
		if len(p.batch) >= batchMax {
			return false, p.flush(ctx)
		}
	}
	return false, nil
}

// flush relays the batch: whole committed transactions, confirmed with
// the last one's commit LSN.
func (p *pass) flush(ctx context.Context) error {
	evs := p.batch
	p.batch = nil
	if len(evs) == 0 {
		return nil
	}
	p.res.Decoded += len(evs)
	commit := evs[len(evs)-1].Commit
	if p.opt.ConfirmFirst { // anti-pattern: the slot forgets them before the broker has them
		if err := p.confirm(ctx, commit); err != nil {
			return err
		}
		p.res.Settled += len(evs)
	}
	if p.opt.SkipPublish {
		p.res.Crashed = true
		return nil
	}
	msgs := make([]broker.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = broker.Message{EventID: ev.EventID, Payload: ev.Payload}
	}
	ids, err := p.b.Publish(ctx, msgs)
	for i, id := range ids {
		p.res.Published = append(p.res.Published, Published{EventID: evs[i].EventID, EntryID: id, Payload: evs[i].Payload})
	}
	if err != nil {
		return fmt.Errorf("%w: %w", broker.ErrPublish, err) // nothing of it confirmed
	}
	if p.opt.SkipConfirm {
		p.res.Crashed = true
		return nil
	}
	if !p.opt.ConfirmFirst {
		p.res.Settled += len(evs)
		return p.confirm(ctx, commit)
	}
	return nil
}

// confirm tells the slot everything up to lsn is done.
func (p *pass) confirm(ctx context.Context, lsn pglogrepl.LSN) error {
	p.res.Confirmed = lsn
	return p.status(ctx, lsn, false)
}

// position is what the pass may report as done: what it confirmed, else
// what the slot held before it.
func (p *pass) position() pglogrepl.LSN {
	if p.res.Confirmed > 0 {
		return p.res.Confirmed
	}
	return p.held
}

func (p *pass) status(ctx context.Context, lsn pglogrepl.LSN, reply bool) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, p.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: lsn, ReplyRequested: reply})
	if err != nil {
		return fmt.Errorf("standby status update: %w", err)
	}
	return nil
}
