package judge

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/sysrun"
)

// A consumer whose INSERT waits on a row lock the relay's open
// transaction holds is described as such, from the server, by its
// connection's port: what it runs (the command word only), what it waits
// on, and who blocks it, for how long. A connection of no service's is
// said as a backend.
func TestStuckWitnessSaysWhatAConnectionWaitsOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testservers.PG(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table := fmt.Sprintf("dbwait_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, secret text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+table) })
	conn := func() (*pgx.Conn, int) {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c, c.PgConn().Conn().LocalAddr().(*net.TCPAddr).Port
	}
	relay, relayPort := conn()
	consumer, consumerPort := conn()
	if _, err := relay.Exec(ctx, "BEGIN; INSERT INTO "+table+" VALUES (1, 'hunter2')"); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := consumer.Exec(ctx, "INSERT INTO "+table+" VALUES (1, 'hunter2') ON CONFLICT DO NOTHING")
		blocked <- err
	}()
	live := []sysrun.Live{{Name: "consumer"}, {Name: "relay"}}
	live[0].DB[1].Ports, live[1].DB[1].Ports = []int{consumerPort}, []int{relayPort}
	var got map[string][2]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got = dbWaits(ctx, [2]*pgxpool.Pool{nil, pool}, live)
		if strings.Contains(got["consumer"][1], "blocked by") || time.Now().After(deadline) {
			break
		}
	}
	c, r := got["consumer"][1], got["relay"][1]
	t.Logf("consumer_db: consumer: %s; relay: %s", c, r)
	for _, want := range []string{"one in INSERT for ", ", waiting on Lock:transactionid, blocked by service relay's connection (idle in transaction for "} {
		if !strings.Contains(c, want) {
			t.Errorf("the consumer's witness %q: want %q", c, want)
		}
	}
	if !strings.HasPrefix(r, "one idle in transaction for ") {
		t.Errorf("the relay's witness %q: want its open transaction", r)
	}
	if strings.Contains(c+r, "hunter2") || strings.Contains(c+r, table) {
		t.Errorf("a statement's text reached the witness: %q, %q", c, r)
	}
	// Not a service's: the blocker is said as a backend.
	live[1].DB[1].Ports = nil
	if got := dbWaits(ctx, [2]*pgxpool.Pool{nil, pool}, live)["consumer"][1]; !strings.Contains(got, ", no service's (idle in transaction for ") {
		t.Errorf("a blocker of no service's: %q", got)
	}
	if _, err := relay.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if got := dbWaits(ctx, [2]*pgxpool.Pool{nil, pool}, live); got["consumer"][1] != "" {
		t.Errorf("nothing waits any more: %q", got["consumer"][1])
	}
}
