package world

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/internal/testservers"
	schema "github.com/outboxdrill/runner/sql"
)

// A dead run's producer database with the CDC relay's slot: clean drops
// the slot, then the database (a slot would refuse the drop).
func TestCleanDropsADeadRunsSlot(t *testing.T) {
	testservers.CleanAlone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pgURL := testservers.PG(t)
	admin, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	name := namePrefix + "_" + newRunID() + "_1_p"
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	cfg, _ := pgx.ParseConfig(pgURL)
	cfg.Database = name
	db, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, schema.Producer); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name); err != nil {
		t.Fatal(err)
	}
	db.Close(ctx)
	// A backend leaves a moment after its client closed: clean would find
	// the database in use (seen once, under a loaded CI run). Wait it out.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name).Scan(&n) != nil || n == 0 {
			break
		}
	}
	c, err := Clean(ctx, pgURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	var slots, dbs int
	_ = admin.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&slots)
	_ = admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&dbs)
	if slots != 0 || dbs != 0 {
		t.Errorf("after clean (dropped %v, in use %v): %d slot(s), %d database(s) named %s; want none", c.Dropped, c.InUse, slots, dbs, name)
	}
}
