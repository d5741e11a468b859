package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxdrill/runner/broker"
)

// kept is a replication connection a Keep pass left open for the next,
// with what the server told it once per connection.
type kept struct {
	conn      *pgconn.PgConn
	dec       decoder       // the relations the server described on this connection
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
	p := pass{conn: k.conn, b: b, opt: opt, res: &res, held: k.confirmed, dec: &k.dec}
	if err := p.follow(ctx, s.Name, target); err != nil || res.Crashed {
		return res, errors.Join(err, s.disconnect(context.WithoutCancel(ctx), res.Confirmed))
	}
	k.confirmed, k.used = p.position(), time.Now()
	if res.Confirmed > 0 {
		// A running connector does not wait for the server to apply its
		// confirm; whoever reads the slot next does (Stats).
		s.unapplied.Store(uint64(res.Confirmed))
	}
	return res, nil
}

// open connects for replication and starts streaming from the slot's
// confirmed LSN.
func (s *Slot) open(ctx context.Context) error {
	st, err := s.stats(ctx)
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
	err := s.awaitSlot(ctx, confirmed, true)
	if err == nil { // released: the server read everything the connection sent
		s.unapplied.Store(0)
	}
	return err
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
