package pipeline_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/pipeline"
	schema "github.com/outboxdrill/runner/sql"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// world is one test's own producer and consumer databases and Redis stream,
// with the reference pipeline on them.
type world struct {
	prodDB, consDB *pgxpool.Pool
	b              broker.Broker
	prod           *pipeline.Producer
	relay          *pipeline.Relay
	cons           *pipeline.Consumer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	name := "pipeline_test_" + strings.ToLower(rand.Text()[:10])
	w := &world{prodDB: newDB(t, name+"_p", schema.Producer), consDB: newDB(t, name+"_c", schema.Consumer)}
	opt, err := redis.ParseURL(testservers.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	s := redisstream.New(rdb, "outboxdrill:"+name)
	t.Cleanup(func() { _ = s.Delete(context.Background()) })
	w.b = s
	w.prod = &pipeline.Producer{DB: w.prodDB}
	w.relay = &pipeline.Relay{DB: w.prodDB, Broker: s}
	w.cons = &pipeline.Consumer{DB: w.consDB, Broker: s}
	return w
}

// newDB creates a database with the given schema, dropped after the test.
func newDB(t *testing.T, name, ddl string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(ctx) })
	id := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+id+" TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)") })
	cfg, err := pgxpool.ParseConfig(testservers.PG(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	return db
}

// count runs a count(*) query.
func count(t *testing.T, db *pgxpool.Pool, query string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// counts are the row counts of the given tables, for before/after checks.
func counts(t *testing.T, db *pgxpool.Pool, tables ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tb := range tables {
		out[tb] = count(t, db, "SELECT count(*) FROM "+tb)
	}
	return out
}

func transfer(id string, amount int64) pipeline.Transfer {
	return pipeline.Transfer{EventID: id, From: "alice", To: "bob", Amount: amount, Currency: "USD"}
}

// produceAndRelay commits each transfer and publishes it.
func (w *world) produceAndRelay(t *testing.T, ts ...pipeline.Transfer) {
	t.Helper()
	ctx := t.Context()
	for _, tr := range ts {
		if res, err := w.prod.Produce(ctx, tr, pipeline.NoFault); err != nil || !res.Committed {
			t.Fatalf("produce %s: %+v, %v", tr.EventID, res, err)
		}
	}
	if res, err := w.relay.Relay(ctx, pipeline.RelayOptions{}); err != nil || len(res.Published) != len(ts) {
		t.Fatalf("relay: %+v, %v", res, err)
	}
}
