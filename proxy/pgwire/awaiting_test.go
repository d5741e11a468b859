package pgwire

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxdrill/runner/internal/testutil"
)

// ServerPorts are the client_port the server sees for the proxy's
// connections; Awaiting is how long a statement in flight has waited for
// the server's answer, and 0 once it is answered.
func TestServerPortsAndAwaiting(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	c := f.client()
	var port int
	if err := c.QueryRow(ctx, "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&port); err != nil {
		t.Fatal(err)
	}
	if got := f.proxy.ServerPorts(); !slices.Contains(got, port) {
		t.Errorf("ServerPorts %v: want the port the server sees, %d", got, port)
	}
	if d := f.proxy.Awaiting(); d != 0 {
		t.Errorf("nothing in flight: Awaiting %v", d)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Exec(ctx, "SELECT pg_sleep(2)"); done <- err }()
	if !testutil.Eventually(func() bool { return f.proxy.Awaiting() >= 200*time.Millisecond }) {
		t.Errorf("a pg_sleep(2) in flight: Awaiting %v", f.proxy.Awaiting())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := f.proxy.Awaiting(); d != 0 {
		t.Errorf("answered: Awaiting %v", d)
	}
}
