package world

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
)

// TestCleanTakesOnlyTheRunnersShapesAndTypes (issue 41, L3): clean deleted
// a Redis hash named like a stream key and a database drill_deadbeef_01_p,
// a form the runner never makes (its counters are fmt's %d). Now a name
// must be of the exact form and a Redis key of the type the runner gives
// it (a stream; a hash for :seen), checked and deleted in one step.
func TestCleanTakesOnlyTheRunnersShapesAndTypes(t *testing.T) {
	testservers.CleanAlone(t)
	ctx := context.Background()
	p := testConfig(t)
	pg, err := pgx.Connect(ctx, p.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	rdb := redis.NewClient(mustRedis(t, p.URLs[broker.Redis]))
	defer rdb.Close()

	dead := newRunID()
	db := func(n string) string { return namePrefix + "_" + dead + "_" + n }
	for _, name := range []string{db("01_p"), db("1_p")} {
		if _, err := pg.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatal(err)
		}
		defer pg.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
	}
	key := func(n string) string { return namePrefix + ":" + dead + ":" + n }
	stream := func(k string) { rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"a", "b"}}) }
	rdb.HSet(ctx, key("3"), "f", "v")      // a hash named like a stream key
	rdb.Set(ctx, key("4:dlq"), "x", 0)     // a string named like dead letters
	stream(key("05"))                      // not the counter's form
	stream(key("4"))                       // the runner's stream
	rdb.HSet(ctx, key("4:seen"), "f", "v") // and its seen hash
	for _, k := range []string{key("3"), key("4:dlq"), key("05"), key("4"), key("4:seen")} {
		defer rdb.Del(ctx, k)
	}

	c, err := Clean(ctx, p.PGURL, map[string]string{broker.Redis: p.URLs[broker.Redis]})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dropped %v, notes %v", c.Dropped, c.Notes)
	for _, gone := range []string{db("1_p"), key("4"), key("4:seen")} {
		if !slices.Contains(c.Dropped, gone) {
			t.Errorf("%s, the runner's, was not dropped", gone)
		}
	}
	for _, k := range []string{key("3"), key("4:dlq"), key("05")} {
		if rdb.Exists(ctx, k).Val() != 1 || slices.Contains(c.Dropped, k) {
			t.Errorf("Redis key %s, not the runner's, was deleted", k)
		}
	}
	var n int
	_ = pg.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, db("01_p")).Scan(&n)
	if n != 1 || slices.Contains(c.Dropped, db("01_p")) {
		t.Errorf("database %s, not of the runner's form, was dropped", db("01_p"))
	}
}
