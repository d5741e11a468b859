package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/redisstream/redisserver"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
	"github.com/outboxdrill/runner/servers"
)

// TestKillThenCleanEveryBroker SIGKILLs a run on every broker mid-scenario,
// then runs clean: nothing of the run is left on PostgreSQL, Redis, NATS or
// RabbitMQ.
//
// In parallel with the other tests: on a PostgreSQL and a Redis of its own
// (the run's lease found there is this run's, not another test's), the
// brokers' URLs given to the run's process and to clean, not set in the
// environment; clean leaves the live runs of the other tests to them (their
// leases), and CleanAlone keeps every other test that cleans away.
func TestKillThenCleanEveryBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	ctx := context.Background()
	natsURL, rabbitURL := testservers.URL(t, broker.NATS), testservers.URL(t, broker.RabbitMQ)
	pgURL, redisURL := ownServers(t)
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	ro, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	amq, err := amqp.Dial(rabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	defer amq.Close()

	bin := buildRunner(t)
	f := scenarioFile(t, "hang.yaml", "name: hang\nsteps:\n  - produce\n  - consume(block=1m)\n")
	// One worker per broker: each blocks for a minute in its consume, so a
	// broker left waiting for a free worker would plant nothing before the
	// kill.
	cmd := exec.Command(bin, "run", "--broker", "all", "--parallel", "4", "--pg", pgURL, "--redis", redisURL, f)
	cmd.Env = append(os.Environ(), "RUNNER_NATS_URL="+natsURL, "RUNNER_RABBITMQ_URL="+rabbitURL)
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var run string
	for deadline := time.Now().Add(30 * time.Second); run == "" && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		_ = pg.QueryRow(ctx, `SELECT substring(application_name from '^drill_lease_([0-9a-f]{8})$') FROM pg_stat_activity WHERE application_name ~ '^drill_lease_[0-9a-f]{8}$' AND pid <> pg_backend_pid() ORDER BY backend_start DESC LIMIT 1`).Scan(&run)
	}
	if run == "" {
		t.Fatalf("the run's lease never appeared:\n%s", out.String())
	}

	// What the run has on each server.
	count := func() map[string]int {
		n := map[string]int{}
		var k int
		_ = pg.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname LIKE $1`, "drill\\_"+run+"\\_%").Scan(&k)
		n["postgres"] = k
		keys, _ := rdb.Keys(ctx, "drill:"+run+":*").Result()
		n["redis"] = len(keys)
		for s := range js.StreamNames(ctx).Name() {
			if strings.HasPrefix(s, "drill_"+run+"_") {
				n["nats"]++
			}
		}
		for i := 1; i <= 12; i++ { // the counter names streams and databases alike
			for _, q := range []string{".log", ".dlq", ".accounting", ""} {
				ch, err := amq.Channel()
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("drill:%s:%d%s", run, i, q)
				if q == "" {
					err = ch.ExchangeDeclarePassive(name, "fanout", true, false, false, false, nil)
				} else {
					_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
				}
				if err == nil {
					n["rabbitmq"]++
					ch.Close()
				}
			}
		}
		return n
	}
	var before map[string]int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		before = count()
		if before["postgres"] >= 2 && before["redis"] >= 1 && before["nats"] >= 2 && before["rabbitmq"] >= 3 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // into the blocking consume
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	before = count()
	t.Logf("run %s after SIGKILL: %v", run, before)
	for _, k := range []string{"postgres", "redis", "nats", "rabbitmq"} {
		if before[k] == 0 {
			t.Fatalf("the killed run left nothing on %s: the test proves nothing\n%s", k, out.String())
		}
	}

	// A killed run's Redis lease outlives it by up to its TTL (15 s). The
	// test does not wait that out: it brings the expiry forward, and Redis
	// removes the key as it would have then. The lease must still be there,
	// or the run was not killed mid-run.
	if ok, err := rdb.PExpire(ctx, "drill:lease:"+run, time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("the killed run's lease drill:lease:%s: PEXPIRE = %v, %v; want it still held", run, ok, err)
	}
	for deadline := time.Now().Add(5 * time.Second); rdb.Exists(ctx, "drill:lease:"+run).Val() == 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	// Only now alone: the wait above is for this test's own Redis, and
	// another test's clean that took the killed run's NATS streams or
	// RabbitMQ queues first would leave this one's checks true.
	testservers.CleanAlone(t)
	code, stdout, stderr := cli(t, "clean", "--pg", pgURL, "--redis", redisURL, "--nats", natsURL, "--rabbitmq", rabbitURL)
	if code != 0 {
		t.Fatalf("clean: exit %d\n%s\n%s", code, stdout, stderr)
	}
	after := count()
	t.Logf("after clean: %v\n%s", after, stdout)
	for k, v := range after {
		if v != 0 {
			t.Errorf("%d objects of the killed run left on %s after clean", v, k)
		}
	}
	if !strings.Contains(stdout, "note: RabbitMQ: AMQP cannot list queues") {
		t.Errorf("clean does not say what it cannot see on RabbitMQ:\n%s", stdout)
	}
}

// ownServers starts a PostgreSQL and a Redis for the calling test alone,
// as the runner starts its own, removed when the test ends.
func ownServers(t *testing.T) (pgURL, redisURL string) {
	t.Helper()
	ctx := context.Background()
	var pg *servers.Postgres
	var pgErr error
	done := make(chan struct{})
	go func() { defer close(done); pg, pgErr = servers.StartPostgres(ctx, servers.PostgresOptions{}) }()
	rd, rdErr := redisserver.Start(ctx, redisserver.Options{})
	<-done
	if pg != nil {
		t.Cleanup(func() { _ = pg.Discard(context.Background()) })
	}
	if rd != nil {
		t.Cleanup(func() { _ = rd.Discard(context.Background()) })
	}
	if pgErr != nil || rdErr != nil {
		t.Fatalf("own servers: %v", errors.Join(pgErr, rdErr))
	}
	return pg.URL, rd.URL
}

// TestKillKafkaRunThenCleanTakesItsDir SIGKILLs a run on the runner's own
// kfake, then runs clean: the run's drill-kafka-* dir goes (it once
// survived, the kind missing from clean's list of dir kinds), its lease
// file too.
func TestKillKafkaRunThenCleanTakesItsDir(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	testservers.CleanAlone(t) // clean takes the killed run's databases too
	bin := runnerBin(t)
	tmp := t.TempDir()
	env := append(ownEnv(tmp), "RUNNER_PG_URL="+testservers.PG(t))
	f := scenarioFile(t, "hang.yaml", "name: hang\nsteps:\n  - produce\n  - consume(block=1m)\n")
	cmd, out := startRunner(t, bin, env, "run", "--broker", "kafka", f)
	var dirs []string
	for deadline := time.Now().Add(30 * time.Second); len(dirs) == 0; time.Sleep(50 * time.Millisecond) {
		dirs, _ = filepath.Glob(filepath.Join(tmp, "drill-kafka-*"))
		if time.Now().After(deadline) {
			t.Fatalf("the run made no drill-kafka-* dir:\n%s", out.String())
		}
	}
	time.Sleep(time.Second) // into the scenario
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if left, _ := filepath.Glob(filepath.Join(tmp, "drill-kafka-*")); len(left) == 0 {
		t.Fatalf("the killed run left no drill-kafka-* dir: the test proves nothing\n%s", out.String())
	}
	clean := exec.Command(bin, "clean")
	clean.Env = env
	stdout, err := clean.CombinedOutput()
	if err != nil {
		t.Fatalf("clean: %v\n%s", err, stdout)
	}
	if !strings.Contains(string(stdout), "removed "+dirs[0]) {
		t.Errorf("clean does not say it removed %s:\n%s", dirs[0], stdout)
	}
	if rest, _ := filepath.Glob(filepath.Join(tmp, "drill-*")); len(rest) > 0 {
		t.Errorf("the killed run's dir and lease outlived clean: %v\n%s", rest, stdout)
	}
}
