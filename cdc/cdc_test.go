package cdc_test

import (
	"context"
	"crypto/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/pipeline"
	schema "github.com/outboxdrill/runner/sql"
)

func TestMain(m *testing.M) { testservers.Main(m) }

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// setup is a producer database with its slot (created before anything is
// produced, as a connector is) and a Redis stream.
func setup(t testing.TB) (*pgxpool.Pool, *cdc.Slot, broker.Broker) {
	t.Helper()
	name := "cdc_test_" + strings.ToLower(rand.Text()[:10])
	admin, err := pgx.Connect(ctx(t), testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx(t), "CREATE DATABASE "+name+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := pgxpool.ParseConfig(testservers.PG(t))
	cfg.ConnConfig.Database = name
	db, err := pgxpool.NewWithConfig(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx(t), schema.Producer); err != nil {
		t.Fatal(err)
	}
	slot := &cdc.Slot{Name: name, DB: db}
	if err := slot.Create(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := slot.Drop(context.Background()); err != nil {
			t.Errorf("drop slot: %v", err)
		}
		db.Close()
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	opt, _ := redis.ParseURL(testservers.Redis(t))
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	s := redisstream.New(rdb, "outboxdrill:"+name)
	t.Cleanup(func() { _ = s.Delete(context.Background()) })
	return db, slot, s
}

func produce(t testing.TB, db *pgxpool.Pool, ids ...string) {
	t.Helper()
	p := &pipeline.Producer{DB: db}
	for _, id := range ids {
		if _, err := p.Produce(ctx(t), pipeline.Transfer{EventID: id, From: "alice", To: "bob", Amount: 1, Currency: "USD"}, pipeline.NoFault); err != nil {
			t.Fatal(err)
		}
	}
}

func pending(t *testing.T, s *cdc.Slot) []string {
	t.Helper()
	evs, err := s.Pending(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.EventID)
	}
	return ids
}

func events(t *testing.T, b broker.Broker) []string {
	t.Helper()
	ids, err := b.Events(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestRelayPublishesThenConfirms(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e1", "e2")
	if got := pending(t, slot); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("pending before the relay: %v", got)
	}
	res, err := slot.Relay(ctx(t), b, cdc.RelayOptions{})
	if err != nil || res.Decoded != 2 || len(res.Published) != 2 || res.Confirmed == 0 {
		t.Fatalf("relay: %+v, %v", res, err)
	}
	if got := pending(t, slot); len(got) != 0 {
		t.Errorf("pending after the relay: %v", got)
	}
	if got := events(t, b); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Errorf("stream: %v", got)
	}
	st, err := slot.Stats(ctx(t))
	if err != nil || st.Active || st.LagBytes < 0 {
		t.Errorf("stats: %+v, %v", st, err)
	}
}

// Published, not confirmed: the next pass publishes it again.
func TestSkipConfirmPublishesAgain(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e1")
	if _, err := slot.Relay(ctx(t), b, cdc.RelayOptions{SkipConfirm: true}); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, slot); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("pending after the crash: %v", got)
	}
	if _, err := slot.Relay(ctx(t), b, cdc.RelayOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := events(t, b); !slices.Equal(got, []string{"e1", "e1"}) {
		t.Errorf("stream: %v; want e1 twice", got)
	}
}

// Confirmed before publishing, then a crash: the slot has moved past it.
func TestConfirmFirstLosesOnACrash(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e1")
	if _, err := slot.Relay(ctx(t), b, cdc.RelayOptions{ConfirmFirst: true, SkipPublish: true}); err != nil {
		t.Fatal(err)
	}
	if got := pending(t, slot); len(got) != 0 {
		t.Fatalf("pending: %v; want nothing (confirmed)", got)
	}
	if _, err := slot.Relay(ctx(t), b, cdc.RelayOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := events(t, b); len(got) != 0 {
		t.Errorf("stream: %v; want nothing, e1 is lost", got)
	}
}

// A slot dropped and created again never sees what was committed between.
func TestARecreatedSlotSkipsTheGap(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e1")
	if err := slot.Drop(ctx(t)); err != nil {
		t.Fatal(err)
	}
	produce(t, db, "e2")
	if err := slot.Create(ctx(t)); err != nil {
		t.Fatal(err)
	}
	produce(t, db, "e3")
	if _, err := slot.Relay(ctx(t), b, cdc.RelayOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := events(t, b); !slices.Equal(got, []string{"e3"}) {
		t.Errorf("stream: %v; want e3 only", got)
	}
}

func relay(t *testing.T, slot *cdc.Slot, b broker.Broker, opt cdc.RelayOptions) cdc.RelayResult {
	t.Helper()
	res, err := slot.Relay(ctx(t), b, opt)
	if err != nil {
		t.Fatalf("relay %+v: %v", opt, err)
	}
	return res
}

func active(t *testing.T, slot *cdc.Slot) bool {
	t.Helper()
	st, err := slot.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return st.Active
}

// A kept connection stays attached between passes; a pass relays what
// arrived since the last confirm, and what waits is still readable (from a
// copy of the slot, which an attached reader keeps from being peeked at).
func TestKeptConnectionRelaysWhatArrivedSinceTheLastConfirm(t *testing.T) {
	db, slot, b := setup(t)
	keep := cdc.RelayOptions{Keep: true}
	produce(t, db, "e1")
	if res := relay(t, slot, b, keep); len(res.Published) != 1 || res.Settled != 1 {
		t.Fatalf("first pass: %+v", res)
	}
	if !slot.Connected() || !active(t, slot) {
		t.Fatalf("after a kept pass: connected %v, slot active %v; want both", slot.Connected(), active(t, slot))
	}
	produce(t, db, "e2", "e3")
	if got := pending(t, slot); !slices.Equal(got, []string{"e2", "e3"}) {
		t.Fatalf("pending while the relay is attached: %v", got)
	}
	if res := relay(t, slot, b, keep); len(res.Published) != 2 || res.Settled != 2 {
		t.Fatalf("second pass: %+v", res)
	}
	if got := pending(t, slot); len(got) != 0 {
		t.Errorf("pending after the second pass: %v", got)
	}
	if res := relay(t, slot, b, keep); len(res.Published) != 0 {
		t.Errorf("a pass with nothing new published %+v", res.Published)
	}
	if got := events(t, b); !slices.Equal(got, []string{"e1", "e2", "e3"}) {
		t.Errorf("stream: %v", got)
	}
}

// A crash on a kept connection is a crash: the connection goes, the next
// pass starts from the confirmed LSN and publishes again.
func TestKeptSkipConfirmClosesAndPublishesAgain(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e0")
	relay(t, slot, b, cdc.RelayOptions{Keep: true})
	produce(t, db, "e1")
	if res := relay(t, slot, b, cdc.RelayOptions{Keep: true, SkipConfirm: true}); !res.Crashed || len(res.Published) != 1 {
		t.Fatalf("crash pass: %+v", res)
	}
	if slot.Connected() || active(t, slot) {
		t.Fatal("the crashed relay's connection is still open")
	}
	if got := pending(t, slot); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("pending after the crash: %v", got)
	}
	relay(t, slot, b, cdc.RelayOptions{Keep: true})
	if got := events(t, b); !slices.Equal(got, []string{"e0", "e1", "e1"}) {
		t.Errorf("stream: %v; want e1 twice", got)
	}
}

// Confirm first on a kept connection, then a crash: lost, as on a fresh one.
func TestKeptConfirmFirstLosesOnACrash(t *testing.T) {
	db, slot, b := setup(t)
	relay(t, slot, b, cdc.RelayOptions{Keep: true})
	produce(t, db, "e1")
	if res := relay(t, slot, b, cdc.RelayOptions{Keep: true, ConfirmFirst: true, SkipPublish: true}); !res.Crashed || res.Settled != 1 {
		t.Fatalf("crash pass: %+v", res)
	}
	relay(t, slot, b, cdc.RelayOptions{Keep: true})
	if got := events(t, b); len(got) != 0 {
		t.Errorf("stream: %v; want nothing, e1 is lost", got)
	}
}

// A pass that reconnects stops the kept relay first: a slot has one reader.
func TestReconnectingPassClosesTheKeptConnection(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e1")
	relay(t, slot, b, cdc.RelayOptions{Keep: true})
	produce(t, db, "e2")
	if res := relay(t, slot, b, cdc.RelayOptions{}); len(res.Published) != 1 {
		t.Fatalf("reconnecting pass: %+v", res)
	}
	if slot.Connected() || active(t, slot) {
		t.Error("the kept connection outlived a reconnecting pass")
	}
}

// The server ends the kept connection between passes (as a restart or an
// expired wal_sender_timeout would): the next pass connects again, and
// nothing is published twice.
func TestKeptConnectionReopensAfterTheServerHungUp(t *testing.T) {
	db, slot, b := setup(t)
	produce(t, db, "e1")
	relay(t, slot, b, cdc.RelayOptions{Keep: true})
	if _, err := db.Exec(ctx(t), "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", slot.Name); err != nil {
		t.Fatal(err)
	}
	produce(t, db, "e2")
	if res := relay(t, slot, b, cdc.RelayOptions{Keep: true}); len(res.Published) != 1 {
		t.Fatalf("pass after the hang-up: %+v", res)
	}
	if got := events(t, b); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Errorf("stream: %v", got)
	}
}
