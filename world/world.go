// Package world is the servers and brokers a run's scenarios share and
// each scenario's isolation in them: opened (given by URL, probed, or the
// runner's own, started through each registered broker.Kind), leased and
// budgeted once per run; a database pair and broker objects acquired per
// scenario and recycled after it; process control of its servers; the
// system files checked against their schema; and clean.
package world

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/proxy/listen"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
	"github.com/outboxdrill/runner/state"
	"github.com/outboxdrill/runner/steps"
)

// namePrefix starts every database name and stream key the runner creates;
// the run id follows it, so the runner can only ever drop its own objects.
const namePrefix = broker.NamePrefix

// cleanupTimeout bounds each cleanup action; cleanup runs even after Ctrl-C,
// on a context of its own.
const cleanupTimeout = 30 * time.Second

// cleanups is a LIFO chain of undo actions, then the stops of the servers
// the run started, all at once: each is a kill and a dir removed (~15–40 ms
// here), and nothing of one server waits on another.
type cleanups struct {
	mu    sync.Mutex
	fns   []func(context.Context) error
	stops []func(context.Context) error
}

func (c *cleanups) add(fn func(context.Context) error) {
	c.mu.Lock()
	c.fns = append(c.fns, fn)
	c.mu.Unlock()
}

// addStop registers the stop of a server the run started: it runs after
// every action add registered.
func (c *cleanups) addStop(fn func(context.Context) error) {
	c.mu.Lock()
	c.stops = append(c.stops, fn)
	c.mu.Unlock()
}

// run undoes everything in reverse order, then stops the servers, and joins
// the errors.
func (c *cleanups) run() error {
	c.mu.Lock()
	fns, stops := c.fns, c.stops
	c.fns, c.stops = nil, nil
	c.mu.Unlock()
	var errs []error
	for i := len(fns) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		errs = append(errs, fns[i](ctx))
		cancel()
	}
	stopErrs := make([]error, len(stops))
	var wg sync.WaitGroup
	for i, stop := range stops {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			stopErrs[i] = stop(ctx)
		})
	}
	wg.Wait()
	return errors.Join(append(errs, stopErrs...)...)
}

// The two sides of a database pair. A PostgreSQL server of the run is
// World.pgURLs[set*2+side] (and so in pgs, admins and svcSlots): set 0
// serves every scenario but those of set 1, which fault a PostgreSQL
// (faultSet, setOf).
const (
	producerSide = 0
	consumerSide = 1
	mainSet      = 0
	faultsSet    = 1
)

// World is what one run shares: the servers, an admin pool per PostgreSQL
// server, one connection per broker, and the pool of database pairs scenarios run in.
type World struct {
	RunID string
	PGURL string // the producer's server (with --pg, the only one)

	// The producer's and the consumer's PostgreSQL of each set, indexed
	// set*2+side. Set 0: one server for both sides when the runner starts
	// it; with --pg both are that server. Set 1, only when the runner
	// starts its servers and a scenario of the run faults a PostgreSQL
	// (faultSet): a server per side, so that killing one is a crash of one
	// side only, and so that those scenarios, which run one at a time, run
	// beside the others rather than alone.
	pgURLs   [4]string
	admins   [4]*pgxpool.Pool
	pgs      [4]*servers.Postgres // nil with --pg
	pgGen    [2]atomic.Int64      // counts restarts of a set's PostgreSQL servers
	faultSet bool
	// svcSlots are the connections a team's services may open to each
	// server, through the proxies of every scenario of the run
	// (fitBudget: what the run's own pools leave); one value for the
	// indexes of one server.
	svcSlots [4]*listen.Slots

	undo    cleanups
	pairs   [2]pairPool  // per set
	seq     atomic.Int64 // names databases and streams: unique in the run
	managed bool         // the runner started PostgreSQL: it goes with all its databases

	// conns are the run's brokers by name; written only while opening.
	conns   map[string]broker.Conn
	connsMu sync.Mutex
	// brokerURLs are the brokers' URLs (given or the runner's own), for a
	// team's services; written only while opening, under connsMu.
	brokerURLs   map[string]string
	brokerLabels map[string]string // report labels where the server is not the broker itself
	// up holds, per broker Open started, a channel closed once its
	// server is open and leased (or failed: upErr): a scenario on one
	// broker need not wait for another's server to boot (a RabbitMQ node
	// takes seconds). nil in a world whose brokers were opened before it
	// was returned (runner clean's).
	up       map[string]chan struct{}
	upErr    map[string]error // under connsMu
	starting sync.WaitGroup   // broker starts still running: Close waits

	// systems are the system files CheckSystems checked, by file
	// (systemKey): their catalogs and schema files.
	systems map[string]*checkedSystem
	sysMu   sync.Mutex
	// sysdb are the system scenarios' databases kept for reuse (reuse.go).
	sysdb sysDBs

	// walLevel is each set's producer server's wal_level, read when the
	// world opens: whether a scenario's CDC relay can have its slot there
	// is known before the scenario is acquired.
	walLevel [2]string
}

// setBrokerLabel names broker b's server in reports where it is not the
// broker itself: "kafka (kfake)".
func (w *World) setBrokerLabel(b, label string) {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	if w.brokerLabels == nil {
		w.brokerLabels = map[string]string{}
	}
	w.brokerLabels[b] = label
}

// Labels are the report labels of the run's brokers (broker name → label).
func (w *World) Labels() map[string]string {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	out := map[string]string{}
	for b, l := range w.brokerLabels {
		out[b] = l
	}
	return out
}

// BrokerCrash says how broker b's server died, "kafka (kfake) crashed:
// panic: …", with its stack, when it is the runner's own and died of a
// panic (kfake, in a process of its own, panicked on a request it could
// not parse); "" otherwise. The run names it as a panic of its own.
func (w *World) BrokerCrash(b string) (what string, stack []byte) {
	conn, ok := w.brokerConns()[b]
	if !ok {
		return "", nil
	}
	srv, _ := conn.Server()
	c, ok := srv.(interface{ Crashed() *servers.Crash })
	if !ok {
		return "", nil
	}
	cr := c.Crashed()
	if cr == nil {
		return "", nil
	}
	return fmt.Sprintf("%s crashed: %s", cmp.Or(w.Labels()[b], b), cr.What), []byte(cr.Stack)
}

// brokerURL is broker b's URL, given or the runner's own server's.
func (w *World) brokerURL(b string) string {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	return w.brokerURLs[b]
}

func (w *World) setBrokerURL(b, url string) {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	if w.brokerURLs == nil {
		w.brokerURLs = map[string]string{}
	}
	w.brokerURLs[b] = url
}

// Postgres applies a process fault to the runner's own producer or consumer
// PostgreSQL (steps.ProcessControl). Killed, its data dir stays: start runs
// crash recovery.
func (w *World) Postgres(ctx context.Context, set int, s steps.Server, action string) error {
	i := set*2 + pgSide(s)
	pg := w.pgs[i]
	switch action {
	case "kill":
		return pg.Kill(ctx)
	case "stop":
		return pg.Halt(ctx)
	case "start":
		return w.startPG(ctx, i)
	case "restart":
		if err := pg.Kill(ctx); err != nil {
			return err
		}
		return w.startPG(ctx, i)
	}
	return fmt.Errorf("unknown %s action %q", s, action)
}

// startPG starts a side's server again and drops the admin pool's dead
// connections (the scenario's own pools are reset by the step).
func (w *World) startPG(ctx context.Context, i int) error {
	if w.pgs[i].PID() != 0 {
		return nil // running: nothing to start, no connection went stale
	}
	if err := w.pgs[i].Start(ctx); err != nil {
		return err
	}
	w.pgGen[i/2].Add(1)
	w.admins[i].Reset()
	return nil
}

// Config says which servers a world uses: those given by URL, else the
// runner's own. Open caps Parallel to what the PostgreSQL servers'
// connections allow, saying so on Warn (and Log).
type Config struct {
	// PGURL is an existing PostgreSQL server's admin URL; "" starts a
	// throwaway server.
	PGURL string
	// URLs name existing broker servers by broker name; a broker without
	// one gets the runner's own server.
	URLs map[string]string
	// ConnectTimeout bounds how long a server given by URL may take to
	// answer (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Parallel is how many scenarios will hold a database pair at once.
	Parallel int
	// Log, if set, gets what the world started; Warn what the user must
	// see even without Log (parallelism capped by the connection budget).
	Log, Warn io.Writer
}

func (p *Config) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, format+"\n", args...)
	}
}

// Shape is what a run's scenarios ask of its world: never a user setting.
type Shape struct {
	// Brokers are the brokers whose servers the world opens.
	Brokers []string
	// SplitDBs: a scenario crashes one side's PostgreSQL, so each side gets
	// a server of its own for such scenarios (else one serves both: faster).
	SplitDBs bool
}

// Open connects to (or starts) the servers cfg names, with one server for
// both database sides (two more when sh.SplitDBs) and the brokers of sh.
// Close undoes all of it, also when Open fails half-way.
func Open(ctx context.Context, cfg *Config, sh Shape) (*World, error) {
	w := &World{RunID: newRunID(), conns: map[string]broker.Conn{}}
	if err := w.open(ctx, cfg, sh); err != nil {
		return nil, errors.Join(err, w.Close())
	}
	return w, nil
}

func (w *World) open(ctx context.Context, p *Config, sh Shape) (err error) {
	if err := w.startServers(ctx, p, sh); err != nil {
		return err
	}
	for i, url := range w.servers() {
		if j := w.sameServer(i); j < i {
			w.admins[i] = w.admins[j]
			continue
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return fmt.Errorf("PostgreSQL %s: %w", redact.URL(url), redact.Err(url, err))
		}
		if cfg.ConnConfig.ConnectTimeout == 0 { // the URL's connect_timeout wins
			cfg.ConnConfig.ConnectTimeout = p.connectTimeout()
		}
		admin, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("PostgreSQL %s: %w", redact.URL(url), redact.Err(url, err))
		}
		w.admins[i] = admin
		w.undo.add(func(context.Context) error { admin.Close(); return nil })
		if err := admin.Ping(ctx); err != nil {
			return fmt.Errorf("PostgreSQL %s: %w", redact.URL(url), redact.Err(url, err))
		}
	}
	if err := w.fitBudget(ctx, p); err != nil {
		return err
	}
	if err := w.lease(ctx); err != nil { // before anything is created
		return err
	}
	if err := w.readWalLevels(ctx); err != nil {
		return err
	}
	for i := range w.pairs {
		w.pairs[i].set = i
		w.pairs[i].init(p.Parallel, &w.seq)
		w.undo.add(w.pairs[i].shutdown)
	}
	w.undo.add(w.dropFreeSystemDBs)
	return nil
}

// readWalLevels reads each set's producer server's wal_level: a CDC
// relay's slot needs logical, and a scenario that would get none is
// skipped before anything is made for it (WalLevel).
func (w *World) readWalLevels(ctx context.Context) error {
	for set := range w.walLevel {
		i := set*2 + producerSide
		if i >= len(w.servers()) {
			w.walLevel[set] = w.walLevel[mainSet] // no set of its own: the same server
			continue
		}
		level, err := cdc.WalLevel(ctx, w.admins[i])
		if err != nil {
			return fmt.Errorf("PostgreSQL %s: read wal_level: %w", redact.URL(w.pgURLs[i]), redact.Err(w.pgURLs[i], err))
		}
		w.walLevel[set] = level
	}
	return nil
}

// WalLevel is the wal_level of the producer's PostgreSQL scenario sc runs
// on, as it was when the world opened.
func (w *World) WalLevel(sc *scenario.Scenario) string { return w.walLevel[w.setOf(sc)] }

// FaultSet reports whether the scenarios that fault a PostgreSQL run on
// servers of their own (the runner's, split: Shape.SplitDBs), one at a
// time beside the others.
func (w *World) FaultSet() bool { return w.faultSet }

// AwaitPairs waits for the database pairs still being created: on the
// servers of the scenarios that fault a PostgreSQL (faultsOnly), or on
// every server. A scenario that kills or stops a server must not meet a
// creation there.
func (w *World) AwaitPairs(faultsOnly bool) {
	for set := range w.pairs {
		if !faultsOnly || set == faultsSet {
			w.pairs[set].pending.Wait()
		}
	}
}

// Control is the process control of scenario sc on broker b: b's server
// and the PostgreSQL servers of sc's set. Its Cannot says, before
// anything is acquired, which of them the runner may not fault.
func (w *World) Control(b string, sc *scenario.Scenario) steps.ProcessControl {
	return control{w, b, w.setOf(sc)}
}

// servers are the run's PostgreSQL URLs by index (set*2+side): set 1's
// only with faultSet.
func (w *World) servers() []string {
	if w.faultSet {
		return w.pgURLs[:]
	}
	return w.pgURLs[:2]
}

// sameServer is the first index of server i's URL: i unless an earlier
// index names the same server.
func (w *World) sameServer(i int) int {
	return slices.Index(w.pgURLs[:], w.pgURLs[i])
}

// setOf is the set of servers scenario sc runs on: 1 for one that faults
// a PostgreSQL, when the run has such a set (faultSet; the scheduler's
// exclusion.ownServers says the same).
func (w *World) setOf(sc *scenario.Scenario) int {
	if w.faultSet && sc != nil && sc.DBFaults {
		return faultsSet
	}
	return mainSet
}

// startServers uses the given URLs, or starts managed servers, all at once:
// each PostgreSQL side and each broker in a goroutine of its own.
func (w *World) startServers(ctx context.Context, p *Config, sh Shape) error {
	if err := probeGiven(ctx, p, sh); err != nil {
		return err
	}
	w.startBrokers(ctx, p, sh.Brokers)
	w.pgURLs = [4]string{p.PGURL, p.PGURL, p.PGURL, p.PGURL}
	if p.PGURL != "" {
		w.PGURL = p.PGURL
		return nil
	}
	// One server for both sides of every scenario; and when a scenario
	// faults a PostgreSQL, a server per side for those scenarios.
	type start struct {
		at   []int // the server's indexes in pgURLs
		side string
	}
	starts := []start{{[]int{0, 1}, "producer and consumer"}}
	if sh.SplitDBs {
		starts = append(starts, start{[]int{2}, "producer, for the scenarios that fault it"},
			start{[]int{3}, "consumer, for the scenarios that fault it"})
	}
	errs := make([]error, len(starts))
	var wg sync.WaitGroup
	for i, st := range starts {
		wg.Go(func() {
			pg, err := servers.StartPostgres(ctx, servers.PostgresOptions{})
			if errs[i] = err; err == nil {
				for _, at := range st.at {
					w.pgURLs[at] = pg.URL
				}
				w.pgs[st.at[0]] = pg
				w.undo.addStop(pg.Discard) // its data goes with it: no shutdown checkpoint
				p.logf("started PostgreSQL (%s) pid %d on port %d in %s", st.side, pg.PID(), pg.Port, pg.Dir)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	w.managed, w.faultSet = true, sh.SplitDBs
	if !w.faultSet {
		w.pgURLs[2], w.pgURLs[3] = w.pgURLs[0], w.pgURLs[1]
	}
	w.PGURL = w.pgURLs[producerSide]
	return nil
}

// probeGiven checks every server given by URL at once, within
// p.ConnectTimeout: a wrong port (a Redis at --pg, a silent listener) is an
// error naming it and what answered, not a client hanging for minutes.
func probeGiven(ctx context.Context, p *Config, sh Shape) error {
	kinds, urls := []string{Postgres}, []string{p.PGURL}
	for _, b := range sh.Brokers {
		kinds, urls = append(kinds, b), append(urls, p.URLs[b])
	}
	errs := make([]error, len(urls))
	var wg sync.WaitGroup
	for i, url := range urls {
		if url != "" {
			wg.Go(func() { errs[i] = Probe(ctx, kinds[i], url, p.connectTimeout()) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *Config) connectTimeout() time.Duration {
	if p.ConnectTimeout <= 0 {
		return DefaultConnectTimeout
	}
	return p.ConnectTimeout
}

// Close drops what the run created and stops what it started.
func (w *World) Close() error {
	w.starting.Wait() // what a start still brings up goes too
	return w.undo.run()
}

// startBrokers opens each broker's server (given, or the runner's own) in
// the background; BrokerUp waits for one.
func (w *World) startBrokers(ctx context.Context, p *Config, brokers []string) {
	w.up, w.upErr = map[string]chan struct{}{}, map[string]error{}
	for _, b := range brokers {
		w.up[b] = make(chan struct{})
	}
	for _, b := range brokers {
		w.starting.Go(func() {
			err := w.openBroker(ctx, p, b)
			if err == nil {
				err = w.leaseBroker(ctx, b)
			}
			w.connsMu.Lock()
			if err != nil {
				w.upErr[b] = err
			}
			w.connsMu.Unlock()
			close(w.up[b])
		})
	}
}

// BrokerUp waits until broker b's server is open and leased, and says
// why not when it could not be.
func (w *World) BrokerUp(ctx context.Context, b string) error {
	ch, ok := w.up[b]
	if !ok {
		return nil // opened with the world, or not this run's
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	return w.upErr[b]
}

// SetupErr is why a broker's server could not be had, nil when all were
// (or are still coming up).
func (w *World) SetupErr() error {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	var errs []error
	for _, b := range slices.Sorted(maps.Keys(w.upErr)) {
		errs = append(errs, w.upErr[b])
	}
	return errors.Join(errs...)
}

// IsUp reports whether broker b's server is open (or will never be).
func (w *World) IsUp(b string) bool {
	ch, ok := w.up[b]
	if !ok {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// brokerConns are the brokers opened so far.
func (w *World) brokerConns() map[string]broker.Conn {
	w.connsMu.Lock()
	defer w.connsMu.Unlock()
	return maps.Clone(w.conns)
}

// createDB creates a database and registers its drop. Names are built by
// the runner only, from the prefix, the run id and a counter.
func (w *World) createDB(ctx context.Context, srv int, name string, undo *cleanups) error {
	// template0 is pristine on any server; template1 may hold someone's objects.
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + " TEMPLATE template0"
	if w.managed {
		// Copying template0's files (and a checkpoint before and after, of a
		// server only this run writes to) takes ~12 ms; PostgreSQL 15's
		// default, WAL_LOG, writes all of it to the WAL: 30–60 ms. On a
		// server the user gave, a checkpoint is theirs to pay for: the default.
		q += " STRATEGY FILE_COPY"
	}
	// Not cancelled with ctx: a CREATE DATABASE interrupted by the run's
	// end (an Interrupt, or the pair nobody waits for any more) may still
	// commit on the server after the client gave up, and then no drop was
	// registered for it (seen: 2 runs in 12 left half a pair). Created to
	// its end, it is dropped with the rest.
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx) // ended before it began: nothing to see through
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createDBTimeout)
	defer cancel()
	_, err := w.admins[srv].Exec(cctx, q)
	// On our own server the data dir goes as a whole; DROP DATABASE would only
	// add a checkpoint per database to the run's wall time.
	if !w.managed && (err == nil || cctx.Err() != nil) {
		// A creation that timed out may still commit: IF EXISTS drops it
		// if it did.
		undo.add(func(ctx context.Context) error { return w.dropDB(ctx, srv, name) })
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return context.Cause(ctx) // ended meanwhile: the caller stops here
}

// createDBTimeout bounds one CREATE DATABASE, which the run's end does not
// interrupt (createDB).
const createDBTimeout = time.Minute

func (w *World) dropDB(ctx context.Context, srv int, name string) error {
	_, err := w.admins[srv].Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

func (w *World) pool(ctx context.Context, srv int, db string) (*pgxpool.Pool, error) {
	return w.poolOf(ctx, srv, db, pairPoolConns)
}

// poolOf is a pool of at most conns connections to database db on server
// srv.
func (w *World) poolOf(ctx context.Context, srv int, db string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(w.pgURLs[srv])
	if err != nil {
		return nil, redact.Err(w.pgURLs[srv], err)
	}
	cfg.ConnConfig.Database = db
	cfg.MaxConns = conns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Inspect tells how to look at a kept scenario's databases and stream: a
// broker's hint for one consumer group (<consumer-id>) once per consumer
// id of the scenario, the exact command.
func (w *World) Inspect(iso *Isolation, b string, consumers ...string) []string {
	psql := func(side int, db string) string { return psqlHint(w.pgURLs[iso.srv(side)], db) }
	m := state.Reference
	if iso.Env != nil {
		m = iso.Env.Mapping() // a team's tables, from its system file
	}
	out, in, proj := tableHints(m)
	hints := []string{"producer DB: " + psql(producerSide, iso.Producer) + out,
		"consumer DB: " + psql(consumerSide, iso.Consumer) + in + proj}
	if conn, ok := w.brokerConns()[b]; ok {
		for _, h := range conn.Hints(iso.StreamKey) {
			if !strings.Contains(h, consumerHole) || len(consumers) == 0 {
				hints = append(hints, h)
				continue
			}
			for _, c := range consumers {
				hints = append(hints, strings.ReplaceAll(h, consumerHole, shellQuote(c)))
			}
		}
	}
	return hints
}

// tableHints are psql's -c arguments that show the outbox, the inbox and
// the read model of mapping m, each one shell word: the reference's
// tables by name; a team's tables double-quoted as the runner's own
// queries name them (schema.table split at its first dot: a name of any
// case, or a keyword, reads right), and its projection as its own query.
func tableHints(m state.Map) (outbox, inbox, projection string) {
	c := func(sql string) string { return " -c " + shellQuote(sql) }
	if !m.Team {
		return c("TABLE outbox"), c("TABLE inbox"), c("TABLE projection")
	}
	return c("TABLE " + sqlName(m.OutboxTable)), c("TABLE " + sqlName(m.InboxTable)), c(m.Projection)
}

// sqlName is a mapped table name as SQL text (state's queries quote it
// the same way).
func sqlName(name string) string {
	schema, table, dotted := strings.Cut(name, ".")
	if !dotted {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// psqlHint is the psql command that opens database db on the server of
// url, with no password (psql asks, or reads ~/.pgpass).
func psqlHint(url, db string) string {
	cfg, _ := pgx.ParseConfig(url)
	if strings.HasPrefix(cfg.Host, "/") { // a Unix socket's directory: a URL has no host for it
		return "psql " + shellQuote(fmt.Sprintf("host=%s port=%d user=%s dbname=%s", cfg.Host, cfg.Port, cfg.User, db))
	}
	return fmt.Sprintf("psql 'postgres://%s@%s/%s'", cfg.User, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), db)
}

// shellQuote is s as one shell word: as it is when plain, else in single
// quotes (a consumer id may hold a space or a quote).
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// consumerHole is where a broker's hint (Conn.Hints) names a consumer id.
const consumerHole = "<consumer-id>"

// redisClient is the run's Redis client (raw bench), or nil: that of the
// first of its brokers, in the kinds' order, whose connection is up and
// hands out a Redis client.
func (w *World) redisClient() *redis.Client {
	for _, k := range broker.Kinds() {
		if w.BrokerUp(context.Background(), k.Name) != nil {
			continue
		}
		if c, ok := w.brokerConns()[k.Name].(interface{ Client() *redis.Client }); ok {
			return c.Client()
		}
	}
	return nil
}

func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
