package world

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/internal/testutil"
)

// silent accepts and says nothing until the client goes.
func silent(c net.Conn) { _, _ = c.Read(make([]byte, 1<<16)); time.Sleep(10 * time.Second) }

func garbage(c net.Conn) {
	_, _ = c.Write([]byte("hello, I am no database\r\n"))
	time.Sleep(10 * time.Second)
}

func hangUp(net.Conn) {}

func hostPort(u string) string {
	u = u[strings.Index(u, "//")+2:]
	u = u[strings.LastIndex(u, "@")+1:]
	u, _, _ = strings.Cut(u, "/")
	u, _, _ = strings.Cut(u, "?")
	return u
}

// TestProbeNamesAWrongServer: a --pg (or broker URL) at a silent port, a
// port that answers garbage or hangs up, or another kind of server is an
// error within the connect timeout that names the address and what
// answered; the right servers pass.
func TestProbeNamesAWrongServer(t *testing.T) {
	silentAddr, garbageAddr, hangUpAddr := testutil.Listener(t, silent), testutil.Listener(t, garbage), testutil.Listener(t, hangUp)
	pg, rd := testservers.PG(t), testservers.Redis(t)
	ctx := context.Background()
	const timeout = time.Second
	for _, tc := range []struct {
		kind, url, want string
	}{
		{Postgres, "postgres://u:secret@" + silentAddr + "/db", silentAddr + " gave no answer within 1s; is a PostgreSQL server there?"},
		{Postgres, "postgres://u:secret@" + garbageAddr + "/db", garbageAddr + ` does not speak the PostgreSQL protocol: it answered "hello, I am no database\r\n"`},
		{Postgres, "postgres://u:secret@" + hangUpAddr + "/db", hangUpAddr + " does not speak the PostgreSQL protocol: it closed the connection without a reply"},
		{Postgres, "postgres://u:secret@" + hostPort(rd) + "/db", hostPort(rd) + ` does not speak the PostgreSQL protocol: it answered "+PONG\r\n" (a Redis server?)`},
		{broker.Redis, "redis://:secret@" + silentAddr, silentAddr + " gave no answer within 1s; is a Redis server there?"},
		{broker.Redis, "redis://:secret@" + hostPort(pg), hostPort(pg) + " does not speak the Redis protocol: it closed the connection without a reply"},
		{broker.NATS, "nats://u:secret@" + silentAddr, silentAddr + " gave no answer within 1s; is a NATS server there?"},
		{broker.NATS, "nats://u:secret@" + hostPort(rd), hostPort(rd) + ` does not speak the NATS protocol: it answered "+PONG\r\n" (a Redis server?)`},
		{broker.RabbitMQ, "amqp://u:secret@" + silentAddr + "/", silentAddr + " gave no answer within 1s; is a RabbitMQ (AMQP 0-9-1) server there?"},
		{broker.RabbitMQ, "amqp://u:secret@" + hostPort(rd) + "/", hostPort(rd) + ` does not speak the RabbitMQ (AMQP 0-9-1) protocol: it answered "+PONG\r\n" (a Redis server?)`},
	} {
		// Each waits on a server, most on a silent one for the whole
		// timeout: the probes wait side by side.
		t.Run(tc.kind+"@"+strings.SplitN(tc.want, " ", 2)[0], func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := Probe(ctx, tc.kind, tc.url, timeout)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s at %s: err %v\nwant %q", tc.kind, tc.url, err, tc.want)
			}
			if took > timeout+500*time.Millisecond {
				t.Errorf("%s at %s: took %s, timeout %s", tc.kind, tc.url, took, timeout)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: the message shows the password: %v", tc.kind, err)
			}
		})
	}
	nats := testservers.URL(t, broker.NATS)
	if err := Probe(ctx, broker.NATS, "nats://"+hostPort(rd), timeout); err == nil {
		t.Error("Redis passes as NATS")
	}
	for _, tc := range []struct{ kind, url string }{{Postgres, pg}, {broker.Redis, rd}, {broker.NATS, nats}, {broker.NATS, nats + ", nats://" + silentAddr}} {
		if err := Probe(ctx, tc.kind, tc.url, timeout); err != nil {
			t.Errorf("the real %s fails the probe: %v", tc.kind, err)
		}
	}
}

// TestOpenConnectTimeout: a run whose --pg or --redis is a silent port
// fails within the connect timeout (it hung ~120 s), naming it.
func TestOpenConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := testutil.Listener(t, silent)
	for _, p := range []Config{
		{PGURL: "postgres://u@" + addr + "/db?sslmode=disable", URLs: map[string]string{broker.Redis: testservers.Redis(t)}, ConnectTimeout: time.Second},
		{PGURL: testservers.PG(t), URLs: map[string]string{broker.Redis: "redis://" + addr}, ConnectTimeout: time.Second},
	} {
		start := time.Now()
		w, err := Open(context.Background(), &p, redisOnly)
		if err == nil {
			w.Close()
			t.Fatalf("%+v: opened", p)
		}
		if took := time.Since(start); took > 3*time.Second || !strings.Contains(err.Error(), addr+" gave no answer within 1s") {
			t.Errorf("after %s: %v", took, err)
		}
	}
}

// TestProbeRabbitMQ: a real RabbitMQ passes; a NATS server at --rabbitmq
// is named.
func TestProbeRabbitMQ(t *testing.T) {
	ctx := context.Background()
	if err := Probe(ctx, broker.RabbitMQ, testservers.URL(t, broker.RabbitMQ), time.Second); err != nil {
		t.Errorf("the real RabbitMQ fails the probe: %v", err)
	}
	nats := testservers.URL(t, broker.NATS)
	err := Probe(ctx, broker.RabbitMQ, "amqp://"+hostPort(nats)+"/", time.Second)
	if err == nil || !strings.Contains(err.Error(), `(a NATS server?)`) {
		t.Errorf("NATS at --rabbitmq: %v", err)
	}
	if err := Probe(ctx, Postgres, "postgres://"+hostPort(testservers.URL(t, broker.RabbitMQ))+"/db", time.Second); err == nil || !strings.Contains(err.Error(), "does not speak the PostgreSQL protocol") {
		t.Errorf("RabbitMQ at --pg: %v", err)
	}
}
