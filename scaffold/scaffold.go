// Package scaffold writes a team's first system file from what its own
// services do: `runner init` applies the team's schemas to throwaway
// databases and reads the catalogs for the outbox, inbox and read-model
// tables, then runs the relay and the consumer behind the runner's proxies,
// fault-free, with one probe event, and reads off the wire and the tables
// which table, column, field and group each key of the system file names.
// Every key it writes carries its evidence; what it could not tell apart
// it writes as commented alternatives; what it could not infer at all is
// an error naming what to add.
package scaffold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/outboxdrill/runner/internal/outfile"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/runner"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
	"github.com/outboxdrill/runner/sysrun"
)

// Params configure init.
type Params struct {
	Relay, Consumer Command
	// Schemas are the producer's and the consumer's DDL files, as given
	// (relative to where init runs).
	Schemas [2]string
	Broker  string
	// Outbox and Inbox pick the table among several of their shape (""
	// lets init take the first: the probe goes into one outbox only).
	Outbox, Inbox string
	Out           string // where system.yaml and its scenarios go
	Force         bool   // overwrite files that are there
	// Runner holds --pg, the broker URLs and the connect timeout.
	Runner runner.Params
	Log    io.Writer // one line per thing init does
}

// Init is one `runner init`: its servers, kept open from the probe to the
// fault-free drill.
type Init struct {
	p          Params
	cwd, out   string // absolute
	pg         *servers.Postgres
	pgURL      string
	session    *runner.Session
	opened     chan struct{} // closed once OpenSession returned
	sessionErr error
	console    *console
	mu         sync.Mutex
	hooks      map[*scenario.Scenario]func(*sysrun.Run) func(*report.Result)
}

// Open starts (or connects to) the servers: PostgreSQL first, since both
// the catalog and the session use it, then the session and its broker.
func Open(ctx context.Context, p Params) (in *Init, err error) {
	in = &Init{p: p, console: &console{w: p.Runner.Out}, hooks: map[*scenario.Scenario]func(*sysrun.Run) func(*report.Result){}}
	if in.cwd, err = os.Getwd(); err != nil {
		return nil, err
	}
	if in.out, err = filepath.Abs(p.Out); err != nil {
		return nil, err
	}
	// The services run in the out dir, where the system file goes.
	if err := outfile.Dir(in.out, 0o755); err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, in.Close())
		}
	}()
	in.pgURL = p.Runner.PGURL
	if in.pgURL == "" {
		if in.pg, err = servers.StartPostgres(ctx, servers.PostgresOptions{}); err != nil {
			return in, err
		}
		in.pgURL = in.pg.URL
		in.logf("started PostgreSQL (pid %d, port %d)", in.pg.PID(), in.pg.Port)
	}
	rp := p.Runner
	rp.PGURL, rp.Brokers, rp.BrokerGiven, rp.Parallel = in.pgURL, []string{p.Broker}, true, 1
	rp.Out, rp.SystemRun = in.console, in.hook
	// The broker's server starts while init reads the catalogs (a
	// RabbitMQ node takes seconds).
	in.opened = make(chan struct{})
	go func() {
		defer close(in.opened)
		in.session, in.sessionErr = runner.OpenSession(ctx, rp)
	}()
	return in, nil
}

// waitSession waits for the session Open started.
func (in *Init) waitSession() error {
	<-in.opened
	return in.sessionErr
}

// PGURL is the PostgreSQL server init uses (given, or its own).
func (in *Init) PGURL() string { return in.pgURL }

// Close stops what Open started.
func (in *Init) Close() error {
	var errs []error
	if in.opened != nil {
		<-in.opened
	}
	if in.session != nil {
		errs = append(errs, in.session.Close())
	}
	if in.pg != nil {
		errs = append(errs, in.pg.Discard(context.Background()))
	}
	return errors.Join(errs...)
}

// hook is the session's SystemRun: the probe's own, for its scenario.
func (in *Init) hook(sc *scenario.Scenario, run *sysrun.Run) func(*report.Result) {
	in.mu.Lock()
	h := in.hooks[sc]
	in.mu.Unlock()
	if h == nil {
		return nil
	}
	return h(run)
}

func (in *Init) setHook(sc *scenario.Scenario, h func(*sysrun.Run) func(*report.Result)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.hooks[sc] = h
}

// hidden is a name in the out dir for what init only parses (the probe's
// system file and scenario): never written there.
func (in *Init) hidden(what string) string { return filepath.Join(in.out, ".init-"+what+".yaml") }

func (in *Init) logf(format string, args ...any) {
	if in.p.Log != nil {
		fmt.Fprintf(in.p.Log, "init: "+format+"\n", args...)
	}
}

// console is the session's console: silent while the probe runs (its
// verdict is init's to read), the user's for the drill.
type console struct {
	mu   sync.Mutex
	w    io.Writer
	mute bool
}

func (c *console) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mute || c.w == nil {
		return len(b), nil
	}
	return c.w.Write(b)
}

func (c *console) quiet() { c.mu.Lock(); c.mute = true; c.mu.Unlock() }
func (c *console) loud()  { c.mu.Lock(); c.mute = false; c.mu.Unlock() }
