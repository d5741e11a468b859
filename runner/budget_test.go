package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/scenariotest"
	"github.com/outboxdrill/runner/internal/testservers"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
)

// lowPG is a throwaway PostgreSQL with max_connections=30 (3 of them
// reserved for superusers, the default).
func lowPG(t *testing.T) string {
	t.Helper()
	pg, err := servers.StartPostgres(t.Context(), servers.PostgresOptions{Settings: []string{"max_connections=30"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Discard(context.Background()) })
	return pg.URL
}

// --parallel 64 against a max_connections=30 server: the run caps its
// parallelism to what fits, says so, passes, and an outside client that
// connects at any moment of the run gets in, with a slot to spare for a
// non-superuser.
func TestParallelCappedByConnectionBudget(t *testing.T) {
	url := lowPG(t)
	var scs []*scenario.Scenario
	for i := range 12 {
		sc, errs := scenario.Parse(fmt.Sprintf("s%d.yaml", i), fmt.Appendf(nil,
			"name: s%d\nsteps:\n  - produce: {event: e-1, amount: 1}\n  - relay\n  - sleep: {for: 200ms}\n  - consume\n  - expect: {inbox.rows: {accounting: 1}}\n", i), scenariotest.Kinds())
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		scs = append(scs, sc...)
	}
	// The outside client: connects anew every 10 ms and counts client backends.
	var peak atomic.Int64
	var refused []error
	stop := make(chan struct{})
	var polling sync.WaitGroup
	polling.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				refused = append(refused, err)
				continue
			}
			var n int64
			if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&n); err == nil && n > peak.Load() {
				peak.Store(n)
			}
			_ = conn.Close(context.Background())
		}
	})
	var warn strings.Builder
	p := Params{PGURL: url, URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 64, Warn: &warn}
	rep, err := Run(t.Context(), p, scs)
	close(stop)
	polling.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if n := rep.Failed(); n > 0 || len(rep.Results) != len(scs) {
		t.Errorf("%d of %d scenarios failed, %d not run", n, len(scs), len(rep.NotRun))
		for _, r := range rep.Results {
			if len(r.Failures) > 0 {
				t.Log(r.Scenario.Name, r.Failures)
			}
		}
	}
	if !strings.Contains(warn.String(), "--parallel 64 capped to 2 by the connection budget: PostgreSQL 127.0.0.1:") ||
		!strings.Contains(warn.String(), "allows 30 connections (max_connections) - 3 reserved") {
		t.Errorf("warning: %q", warn.String())
	}
	if len(refused) > 0 {
		t.Errorf("an outside client was refused %d times: %v", len(refused), refused[0])
	}
	if n := peak.Load(); n >= 30-3 {
		t.Errorf("peak %d client connections: no slot left for a non-superuser (max_connections 30, 3 reserved)", n)
	}
	t.Logf("peak %d client connections (the outside client's included)", peak.Load())
}

// When not even one scenario's databases fit, the run does not start.
func TestConnectionBudgetTooSmallForOnePair(t *testing.T) {
	url := lowPG(t)
	for range 16 { // 30 - 3 reserved - 16 - 3 margin = 8 free: the admin pool's 4 and half a pair
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
	}
	p := Params{PGURL: url, URLs: map[string]string{broker.Redis: testservers.Redis(t)}, Parallel: 1}
	s, err := OpenSession(t.Context(), p)
	if err == nil {
		_ = s.Close()
		t.Fatal("OpenSession: want an error, got a world")
	}
	want := "not enough PostgreSQL connections for even one scenario: PostgreSQL 127.0.0.1:"
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "16 in use") || !strings.Contains(err.Error(), "+ 8 per parallel scenario") {
		t.Fatalf("error %q, want it to contain %q, 16 in use and 8 per parallel scenario", err, want)
	}
}
