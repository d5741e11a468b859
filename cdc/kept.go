package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outboxdrill/runner/broker"
)

// kept is a replication connection a Keep pass left open for the next,
// with what the server told it once per connection.
type kept struct {
	conn      *pgconn.PgConn
	dec       decoder       // the relations the server described on this connection
	carry     []Event       // decoded after the last pass's confirm: the next one publishes them
	confirmed pglogrepl.LSN // the position this connection last reported done
	idleMax   time.Duration // past this without a word from us the server may have hung up
	used      time.Time     // when the last pass ended
}

// relayKept runs a pass on the kept connection, opening it first when
// there is none. A connection the server closed meanwhile (a restart, an
// expired wal_sender_timeout) is opened again once, as a connector
// reconnects, provided nothing of the pass was published or confirmed yet.
func (s *Slot) relayKept(ctx context.Context, b broker.Broker, opt RelayOptions) (RelayResult, error) {
	if s.kept != nil && time.Since(s.kept.used) > s.kept.idleMax {
		if err := s.disconnect(ctx, 0); err != nil {
			return RelayResult{}, err
		}
	}
	target, err := s.flushed(ctx)
	if err != nil {
		return RelayResult{}, err
	}
	reused := s.kept != nil
	res, err := s.keptPass(ctx, b, opt, target)
	if err != nil && reused && !res.Crashed && len(res.Published) == 0 && res.Confirmed == 0 {
		res, err = s.keptPass(ctx, b, opt, target)
	}
	return res, err
}

// keptPass streams up to target on the kept connection (opened when
// missing). A fault or an error closes it: the relay crashed.
func (s *Slot) keptPass(ctx context.Context, b broker.Broker, opt RelayOptions, target pglogrepl.LSN) (RelayResult, error) {
	res := RelayResult{Opened: s.kept == nil}
	if res.Opened {
		if err := s.open(ctx); err != nil {
			return res, err
		}
	}
	k := s.kept
	p := pass{conn: k.conn, b: b, opt: opt, res: &res, held: k.confirmed, dec: &k.dec, batch: k.carry}
	k.carry = nil
	err := p.follow(ctx, s.Name, target)
	if err == nil && !res.Crashed && res.Confirmed > 0 {
		err = p.awaitReply(ctx)
	}
	if err != nil || res.Crashed {
		return res, errors.Join(err, s.disconnect(context.WithoutCancel(ctx), res.Confirmed))
	}
	k.confirmed, k.used, k.carry = p.position(), time.Now(), p.batch
	if res.Confirmed == 0 {
		return res, nil
	}
	// The walsender applies a confirm as it answers it: a pass ends once
	// the slot holds it, so that a drill that reads the slot or kills the
	// database next does not race the walsender.
	return res, s.awaitSlot(ctx, res.Confirmed, false)
}

// awaitReply asks the walsender to answer and reads up to its answer: it
// has then read the pass's confirm, which it applies as it answers (a
// keepalive it sent on its own may come first: the slot check after the
// pass settles that). Transactions that arrive meanwhile are decoded and
// carried to the next pass, unpublished and unconfirmed.
func (p *pass) awaitReply(ctx context.Context) error {
	if err := p.status(ctx, p.position(), true); err != nil {
		return err
	}
	for deadline := time.Now().Add(catchUpTimeout); time.Now().Before(deadline); {
		msg, err := p.receive(ctx, time.Until(deadline))
		if err != nil {
			return fmt.Errorf("replication: waiting for the answer to a confirm: %w", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		switch {
		case !ok:
			if e, isErr := msg.(*pgproto3.ErrorResponse); isErr {
				return fmt.Errorf("replication: %s (SQLSTATE %s)", e.Message, e.Code)
			}
		case cd.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID:
			return nil
		case cd.Data[0] == pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return err
			}
			evs, err := p.dec.feed(x.WALData)
			if err != nil {
				return err
			}
			p.batch = append(p.batch, evs...)
		}
	}
	return fmt.Errorf("replication: no answer to a confirm within %s", catchUpTimeout)
}

// open connects for replication and starts streaming from the slot's
// confirmed LSN.
func (s *Slot) open(ctx context.Context) error {
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	if !st.Exists {
		return fmt.Errorf("replication slot %s does not exist", s.Name)
	}
	var timeout time.Duration
	var ms int64
	if err := s.DB.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'").Scan(&ms); err != nil {
		return err
	}
	if timeout = time.Duration(ms) * time.Millisecond; ms <= 0 { // 0: the server never hangs up
		timeout = time.Hour
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	if err := startReplication(ctx, conn, s.Name); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return err
	}
	s.kept = &kept{conn: conn, confirmed: st.Confirmed, idleMax: timeout / 2, used: time.Now()}
	return nil
}

// disconnect closes the kept connection, if any, and waits until the
// server has let go of the slot holding at least confirmed.
func (s *Slot) disconnect(ctx context.Context, confirmed pglogrepl.LSN) error {
	if s.kept == nil {
		return nil
	}
	s.kept.conn.Close(ctx)
	s.kept = nil
	return s.awaitSlot(ctx, confirmed, true)
}

// Disconnect stops the relay whose connection a Keep pass left open, as an
// operator stops a connector; nothing is confirmed by it.
func (s *Slot) Disconnect(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disconnect(ctx, 0)
}

// Connected reports whether a Keep pass left a connection open.
func (s *Slot) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept != nil
}
