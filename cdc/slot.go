// Package cdc is the log-based outbox relay: it reads committed outbox
// inserts from a logical replication slot (pgoutput, publication
// outbox_cdc) on the producer database, publishes each to the broker, and
// confirms the LSN to the slot only after the broker accepted it. There is
// no published flag: an event is unpublished while it is still in the slot,
// i.e. committed after the slot's confirmed LSN.
//
// Its fault windows differ from a polling relay's: a crash after publishing
// and before confirming replays from the confirmed LSN (duplicates, which
// the inbox absorbs); a crash before publishing loses nothing (the slot
// keeps it); a slot dropped and created again starts at the current WAL
// position, so whatever was committed in between is never decoded — lost
// to the relay, recoverable only from the outbox table; and a slot nobody
// reads holds back WAL until the disk fills.
package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Publication is the producer schema's publication of outbox inserts.
const Publication = "outbox_cdc"

// ErrNotLogical: the server's wal_level is not logical, so no logical slot
// can exist there.
var ErrNotLogical = errors.New("wal_level is not logical")

// WalLevel is the server's wal_level setting.
func WalLevel(ctx context.Context, db *pgxpool.Pool) (string, error) {
	var level string
	err := db.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	return level, err
}

// Slot is one logical replication slot on the producer database: the CDC
// relay's position in its WAL.
type Slot struct {
	Name string
	DB   *pgxpool.Pool // the producer database

	mu   sync.Mutex // one pass at a time: a slot has one reader
	kept *kept      // the connection a Relay with Keep left open
}

// Create makes the slot, starting at the current WAL position: changes
// committed before it are never decoded from it.
func (s *Slot) Create(ctx context.Context) error {
	if level, err := WalLevel(ctx, s.DB); err != nil {
		return err
	} else if level != "logical" {
		return fmt.Errorf("%w (it is %s)", ErrNotLogical, level)
	}
	if _, err := s.DB.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s.Name); err != nil {
		return fmt.Errorf("create replication slot %s: %w", s.Name, err)
	}
	return nil
}

// Drop removes the slot if it exists, waiting for a reader that just left to
// let go of it. What was not confirmed goes with it. A connection a Keep
// pass left open is closed first: a slot in use cannot be dropped, so a
// connector is stopped before its slot goes.
func (s *Slot) Drop(ctx context.Context) error {
	if err := s.Disconnect(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		tag, err := s.DB.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", s.Name)
		if err != nil {
			return fmt.Errorf("drop replication slot %s: %w", s.Name, err)
		}
		st, err := s.Stats(ctx)
		if err != nil || !st.Exists || tag.RowsAffected() > 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop replication slot %s: still in use by a reader", s.Name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stats is what a CDC operator watches of a slot.
type Stats struct {
	Exists    bool
	Active    bool          // a reader is attached
	Confirmed pglogrepl.LSN // confirmed_flush_lsn: the relay's acknowledged position
	Current   pglogrepl.LSN // the server's current WAL position
	Retained  int64         // bytes of WAL the slot holds back (current − restart_lsn)
	LagBytes  int64         // current − confirmed
}

// Stats reads the slot from pg_replication_slots.
func (s *Slot) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var confirmed, current string
	var retained, lag *int64
	err := s.DB.QueryRow(ctx, `SELECT active, coalesce(confirmed_flush_lsn, '0/0')::text, pg_current_wal_lsn()::text,
			pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
			pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, s.Name).Scan(&st.Active, &confirmed, &current, &retained, &lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read replication slot %s: %w", s.Name, err)
	}
	st.Exists = true
	st.Confirmed, _ = pglogrepl.ParseLSN(confirmed)
	st.Current, _ = pglogrepl.ParseLSN(current)
	if retained != nil {
		st.Retained = *retained
	}
	if lag != nil {
		st.LagBytes = *lag
	}
	return st, nil
}

// Pending lists the outbox events committed after the slot's confirmed LSN,
// in commit order, by peeking at the slot (which moves nothing). Without a
// slot there is nothing pending in it. A slot a relay is attached to
// cannot be peeked at: then a temporary copy of it is (same restart and
// confirmed LSN), dropped again at once.
func (s *Slot) Pending(ctx context.Context) ([]Event, error) {
	st, err := s.Stats(ctx)
	if err != nil || !st.Exists {
		return nil, err
	}
	conn, err := s.DB.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if !st.Active {
		return peek(ctx, conn.Conn(), s.Name)
	}
	copyName := s.Name + "_peek"
	if _, err := conn.Exec(ctx, "SELECT pg_copy_logical_replication_slot($1, $2, true)", s.Name, copyName); err != nil {
		return nil, fmt.Errorf("copy replication slot %s to peek at it: %w", s.Name, err)
	}
	evs, err := peek(ctx, conn.Conn(), copyName)
	if _, derr := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_drop_replication_slot($1)", copyName); derr != nil {
		// A temporary slot lives as long as its session: end it.
		_ = conn.Hijack().Close(context.WithoutCancel(ctx))
		err = errors.Join(err, derr)
	}
	return evs, err
}

// peek decodes what the slot holds after its confirmed LSN, moving nothing.
func peek(ctx context.Context, conn *pgx.Conn, slot string) ([]Event, error) {
	var d decoder
	var out []Event
	rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2)`, slot, Publication)
	if err != nil {
		return nil, fmt.Errorf("peek replication slot %s: %w", slot, err)
	}
	var data []byte
	_, err = pgx.ForEachRow(rows, []any{&data}, func() error {
		tx, err := d.feed(data)
		out = append(out, tx...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("peek replication slot %s: %w", slot, err)
	}
	return out, nil
}
