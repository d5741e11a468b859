package world

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxdrill/runner/proxy/listen"
)

// pairPoolConns is the size of each database's pool in a pair (World.pool).
const pairPoolConns = 4

// connBudget is what one PostgreSQL server can give the run: its
// max_connections less the slots it reserves, the connections other clients
// hold now and a margin left for clients that come later.
type connBudget struct {
	server        string // host:port, for messages
	max           int    // max_connections
	reserved      int    // superuser_reserved_connections + reserved_connections (PostgreSQL 16+)
	inUse         int    // client backends but the run's own
	margin        int    // left for other clients
	admin         int    // the run's admin pool on this server
	perPair       int    // one parallel scenario's pools on this server
	sidesOnServer int    // database sides of a pair on this server (1 or 2)
}

// free is what the run may use.
func (b connBudget) free() int { return b.max - b.reserved - b.inUse - b.margin }

// pairs is how many database pairs (parallel scenarios) fit.
func (b connBudget) pairs() int { return (b.free() - b.admin) / b.perPair }

// need is what parallel scenarios take at most.
func (b connBudget) need(parallel int) int { return b.admin + parallel*b.perPair }

func (b connBudget) explain() string {
	return fmt.Sprintf("PostgreSQL %s allows %d connections (max_connections) - %d reserved - %d in use - %d left for other clients = %d free; "+
		"the run takes up to %d (its admin pool) + %d per parallel scenario (%s)",
		b.server, b.max, b.reserved, b.inUse, b.margin, b.free(), b.admin, b.perPair, b.pairShape())
}

func (b connBudget) pairShape() string {
	if b.sidesOnServer == 2 {
		return fmt.Sprintf("a producer and a consumer database, a pool of %d each", pairPoolConns)
	}
	return fmt.Sprintf("one database of the pair, a pool of %d", pairPoolConns)
}

// budgetMargin is what a run leaves free for other clients of the server:
// a tenth of max_connections, at least 2.
func budgetMargin(maxConns int) int { return max(2, maxConns/10) }

// fitBudget caps p.Parallel to what every PostgreSQL server of the run can
// serve, saying so (a run of --parallel 64 took 104 connections of a
// max_connections=100 server, and other clients were refused), and fails
// when not even one scenario's databases fit. Called once the admin pools
// are open, before any pair is created.
func (w *World) fitBudget(ctx context.Context, p *Config) error {
	parallel := max(1, p.Parallel)
	capped := parallel
	var why []string
	var budgets [4]connBudget
	for i := range w.servers() {
		if w.sameServer(i) < i {
			continue // one server for both sides: counted once
		}
		b, err := w.readBudget(ctx, i)
		if err != nil {
			return err
		}
		budgets[i] = b
		fits := b.pairs()
		if fits < 1 {
			return fmt.Errorf("not enough PostgreSQL connections for even one scenario: %s, %d in all", b.explain(), b.need(1))
		}
		if fits < capped {
			capped = fits
			why = append(why, b.explain())
		}
	}
	if capped < parallel {
		msg := fmt.Sprintf("runner: --parallel %d capped to %d by the connection budget: %s", parallel, capped, strings.Join(why, "; "))
		p.logf("%s", msg)
		if p.Warn != nil && p.Warn != p.Log {
			fmt.Fprintln(p.Warn, msg)
		}
		p.Parallel = capped
	}
	// What the run's own pools leave is the team's services' (the margin
	// kept for other clients too: a services' slot is what the server
	// could still take, so a capped --parallel never leaves them none):
	// their proxies refuse past it in their own words, where the server
	// would refuse them and the run's own pools after them.
	for i := range w.servers() {
		if j := w.sameServer(i); j < i {
			w.svcSlots[i] = w.svcSlots[j]
			continue
		}
		w.svcSlots[i] = listen.NewSlots(budgets[i].free() + budgets[i].margin - budgets[i].need(capped))
	}
	w.sysdb.setKeepCap(capped)
	return nil
}

// readBudget reads server side i's limits and current use.
func (w *World) readBudget(ctx context.Context, i int) (connBudget, error) {
	admin := w.admins[i]
	cfg := admin.Config().ConnConfig
	b := connBudget{server: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), admin: int(admin.Config().MaxConns)}
	for _, url := range w.servers() {
		if url == w.pgURLs[i] {
			b.sidesOnServer++
		}
	}
	b.perPair = b.sidesOnServer * pairPoolConns
	// reserved_connections (PostgreSQL 16+) keeps slots for roles with
	// pg_use_reserved_connections; missing before 16 (NULL, read as 0).
	// Background processes (autovacuum, WAL sender…) have slots of their
	// own: only client backends count against max_connections here.
	err := admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int + coalesce(current_setting('reserved_connections', true), '0')::int,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid())::int`).
		Scan(&b.max, &b.reserved, &b.inUse)
	if err != nil {
		return b, fmt.Errorf("PostgreSQL %s: read the connection budget: %w", b.server, err)
	}
	b.inUse -= int(admin.Stat().TotalConns()) - 1 // the admin pool's other connections are the run's own
	b.margin = budgetMargin(b.max)
	return b, nil
}
