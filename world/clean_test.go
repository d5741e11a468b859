package world

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	jsbroker "github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/broker/rabbitmq"
	"github.com/outboxdrill/runner/internal/testservers"
)

// TestCleanSparesLiveRunTakesKilledOnes: a live run's databases, stream,
// JetStream streams and RabbitMQ exchange and queues survive a clean; a
// killed run's (another run id, no lease) go on every server; bystanders
// with names of almost the runner's shape stay.
func TestCleanSparesLiveRunTakesKilledOnes(t *testing.T) {
	testservers.CleanAlone(t)
	ctx := context.Background()
	p := testConfig(t)
	p.URLs[broker.NATS], p.URLs[broker.RabbitMQ] = testservers.URL(t, broker.NATS), testservers.URL(t, broker.RabbitMQ)
	sh := Shape{Brokers: []string{broker.Redis, broker.NATS, broker.RabbitMQ}}
	urls := p.URLs

	pg, err := pgx.Connect(ctx, p.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	rdb := redis.NewClient(mustRedis(t, urls[broker.Redis]))
	defer rdb.Close()
	nc, err := nats.Connect(urls[broker.NATS])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	amq, err := amqp.Dial(urls[broker.RabbitMQ])
	if err != nil {
		t.Fatal(err)
	}
	defer amq.Close()

	exists := map[string]func(string) bool{
		"db": func(n string) bool {
			var k int
			_ = pg.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, n).Scan(&k)
			return k == 1
		},
		"key":      func(n string) bool { return rdb.Exists(ctx, n).Val() == 1 },
		"stream":   func(n string) bool { _, err := js.Stream(ctx, n); return err == nil },
		"queue":    func(n string) bool { return amqpExists(t, amq, n, false) },
		"exchange": func(n string) bool { return amqpExists(t, amq, n, true) },
	}

	// The live run: a World with a pair on each broker.
	w, err := Open(ctx, &p, sh)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			w.Close()
		}
	}()
	var live [][2]string
	var pairs []*Pair
	for _, b := range sh.Brokers {
		pr, err := w.TakePair(ctx, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		pairs = append(pairs, pr)
		live = append(live, [2]string{"db", pr.iso.Producer}, [2]string{"db", pr.iso.Consumer})
		switch b {
		case broker.Redis:
			if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: pr.Stream, Values: []string{"a", "b"}}).Err(); err != nil {
				t.Fatal(err)
			}
			live = append(live, [2]string{"key", pr.Stream})
		case broker.NATS:
			s := strings.ReplaceAll(pr.Stream, ":", "_")
			live = append(live, [2]string{"stream", s}, [2]string{"stream", s + "_dlq"})
		case broker.RabbitMQ:
			live = append(live, [2]string{"exchange", pr.Stream}, [2]string{"queue", pr.Stream + ".log"}, [2]string{"queue", pr.Stream + ".dlq"})
		}
	}

	// A killed run's leftovers, and bystanders.
	dead := newRunID()
	base := namePrefix + "_" + dead + "_1"
	key := namePrefix + ":" + dead + ":1"
	var gone, stay [][2]string
	for _, db := range []string{base + "_p", base + "_c", base + "_x"} {
		if _, err := pg.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
		defer pg.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	}
	gone = append(gone, [2]string{"db", base + "_p"}, [2]string{"db", base + "_c"})
	// A killed run's database someone still has a session on is in use: not
	// dropped, and said at once (DROP DATABASE would wait 5 s to refuse).
	held := namePrefix + "_" + dead + "_2_p"
	if _, err := pg.Exec(ctx, "CREATE DATABASE "+held); err != nil {
		t.Fatal(err)
	}
	defer pg.Exec(ctx, "DROP DATABASE IF EXISTS "+held)
	hcfg, err := pgx.ParseConfig(p.PGURL)
	if err != nil {
		t.Fatal(err)
	}
	hcfg.Database = held
	hc, err := pgx.ConnectConfig(ctx, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close(ctx)
	stay = append(stay, [2]string{"db", held})
	stay = append(stay, [2]string{"db", base + "_x"})
	for _, k := range []string{key, key + ":dlq", key + ":other"} {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, Values: []string{"a", "b"}})
		defer rdb.Del(ctx, k)
	}
	gone = append(gone, [2]string{"key", key}, [2]string{"key", key + ":dlq"})
	stay = append(stay, [2]string{"key", key + ":other"})
	if _, err := jsbroker.New(ctx, js, key, jsbroker.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: base + "_other", Subjects: []string{base + "_other.x"}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{base, base + "_dlq", base + "_other"} {
		defer js.DeleteStream(ctx, s)
	}
	gone = append(gone, [2]string{"stream", base}, [2]string{"stream", base + "_dlq"})
	stay = append(stay, [2]string{"stream", base + "_other"})
	// RabbitMQ: a run that recorded its names and died (its connection went,
	// its exclusive lease queue with it); a forged record names a bystander.
	var killed testservers.Host
	kc, err := rabbitmq.Kind.Open(ctx, &killed, urls[broker.RabbitMQ], nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.Lease(ctx, dead); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.New(ctx, key, broker.Scenario{Consumers: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	bystander := key + "x.q"
	ach, _ := amq.Channel()
	if _, err := ach.QueueDeclare(bystander, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ach.QueueDelete(bystander, false, false, false)
	forgeRecord(t, amq, bystander+"\nsomeone.else")
	killed.Close() // the run's connection, and its exclusive lease queue with it
	for _, q := range []string{key + ".log", key + ".dlq", key + ".g"} {
		gone = append(gone, [2]string{"queue", q})
		defer ach.QueueDelete(q, false, false, false)
	}
	gone = append(gone, [2]string{"exchange", key})
	stay = append(stay, [2]string{"queue", bystander})

	c, err := Clean(ctx, p.PGURL, urls)
	if err != nil {
		t.Fatalf("clean: %v", err)
	}
	for _, o := range live {
		if !exists[o[0]](o[1]) {
			t.Errorf("the live run's %s %s was removed", o[0], o[1])
		}
		if !slices.Contains(c.Live, o[1]) {
			t.Errorf("the live run's %s %s is not listed as live: %v", o[0], o[1], c.Live)
		}
	}
	for _, o := range gone {
		if exists[o[0]](o[1]) {
			t.Errorf("the killed run's %s %s is still there", o[0], o[1])
		}
		if !slices.Contains(c.Dropped, o[1]) {
			t.Errorf("the killed run's %s %s is not listed as removed: %v", o[0], o[1], c.Dropped)
		}
	}
	for _, o := range stay {
		if !exists[o[0]](o[1]) {
			t.Errorf("bystander %s %s was removed", o[0], o[1])
		}
	}
	if !slices.Contains(c.InUse, held) {
		t.Errorf("the killed run's database %s with a session on it is not listed in use: %v", held, c.InUse)
	}
	hc.Close(ctx)
	if _, err := pg.Exec(ctx, "DROP DATABASE "+held); err != nil {
		t.Fatal(err)
	}
	if len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "rabbitmqctl list_queues") {
		t.Errorf("notes: %q", c.Notes)
	}

	// The run ends: its pairs come back, its world closes, a clean finds
	// nothing of it.
	for _, pr := range pairs {
		if err := w.ReturnPair(ctx, pr); err != nil {
			t.Fatal(err)
		}
	}
	closed = true
	if err := w.Close(); err != nil {
		t.Fatalf("the live run failed to close after a clean: %v", err)
	}
	// Its records went with it: the registry holds none of this run's.
	for _, d := range takeRecords(t, ach) {
		if strings.Contains(string(d.Body), w.RunID) {
			t.Errorf("a run that ended well left its record %q", d.Body)
		}
		d.Nack(false, true)
	}
	c, err = Clean(ctx, p.PGURL, urls)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(c.Live, c.Dropped...) {
		if strings.Contains(n, w.RunID) || strings.Contains(n, dead) {
			t.Errorf("second clean: %s", n)
		}
	}
}

func mustRedis(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// rabbitRegistry is the queue where runs record their RabbitMQ names
// (broker/rabbitmq: AMQP cannot list queues).
const rabbitRegistry = namePrefix + ".leftovers"

// amqpExists declares name passively on a channel of its own (a miss
// closes the channel); another connection's exclusive queue exists too.
func amqpExists(t *testing.T, conn *amqp.Connection, name string, exchange bool) bool {
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if exchange {
		err = ch.ExchangeDeclarePassive(name, amqp.ExchangeFanout, true, false, false, false, nil)
	} else {
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	var ae *amqp.Error
	return err == nil || !exchange && errors.As(err, &ae) && ae.Code == amqp.ResourceLocked
}

// forgeRecord puts a record naming body's lines in the registry, confirmed.
func forgeRecord(t *testing.T, conn *amqp.Connection, body string) {
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", rabbitRegistry, true, false, amqp.Publishing{Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
		t.Fatalf("the record was not confirmed: %v", err)
	}
}

// takeRecords takes every record of the registry, each held unacknowledged.
func takeRecords(t *testing.T, ch *amqp.Channel) []amqp.Delivery {
	var held []amqp.Delivery
	for {
		d, ok, err := ch.Get(rabbitRegistry, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return held
		}
		held = append(held, d)
	}
}
