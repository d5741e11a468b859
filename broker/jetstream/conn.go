package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/broker/jetstream/natsserver"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/internal/redact"
)

// conn is a run's NATS connection, and its server when the runner's own.
type conn struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *natsserver.Server
}

// open connects for drills: a server a step killed is the answer, not a
// blip to wait out, so nothing is buffered while disconnected and
// reconnects are quick.
func open(_ context.Context, h broker.Host, url string, own broker.Process) (broker.Conn, error) {
	var c conn
	c.srv, _ = own.(*natsserver.Server)
	nc, err := nats.Connect(url, nats.Name("outboxdrill"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redact.URL(url), redact.Err(url, err))
	}
	h.Defer(func(context.Context) error { nc.Close(); return nil })
	c.nc = nc
	c.js, err = jetstream.New(nc)
	return c, err
}

func (c conn) New(ctx context.Context, key string, sc broker.Scenario) (broker.Broker, error) {
	return New(ctx, c.js, key, options(sc))
}

func (c conn) Server() (broker.Process, string) {
	if c.srv == nil {
		return nil, ""
	}
	return c.srv, ""
}

// Ready waits for the client's own reconnect.
func (c conn) Ready(ctx context.Context) error { return c.await(ctx, true) }

var _ broker.Downer = conn{}

// Down waits until the client has seen its server go (it reads the
// connection in the background): from then on a publish fails at once
// (nothing is buffered while disconnected), where one sent a moment
// earlier went into the dead connection and waited for its PubAck.
func (c conn) Down(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, downWait)
	defer cancel()
	return c.await(ctx, false)
}

// downWait bounds Down: a client reads its server's end within
// milliseconds on loopback.
const downWait = 10 * time.Second

// await polls until the client is connected (or not), within ctx.
func (c conn) await(ctx context.Context, connected bool) error {
	for c.nc.IsConnected() != connected {
		select {
		case <-ctx.Done():
			return fmt.Errorf("nats: the client is still %s: %w", c.nc.Status(), context.Cause(ctx))
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Hints tell how to look at a kept scenario's stream (the nats CLI): the
// stream's name is the key sanitized as New names it.
func (c conn) Hints(key string) []string {
	// Not ConnectedUrlRedacted: it hides a password, not a token in the
	// user info (nats://TOKEN@host), which redact.URL hides too.
	srv, sn := redact.URL(c.nc.ConnectedUrl()), sanitize(key)
	return []string{
		"stream:      nats --server " + srv + " stream info " + sn,
		"consumers:   nats --server " + srv + " consumer ls " + sn,
		"dead letters: nats --server " + srv + " stream info " + sn + dlqSuffix,
	}
}

// leftoverStream is a scenario's stream or its dead letters: the runner's
// key drill:ID:N sanitized (New), and nothing else.
var leftoverStream = lazy.Regexp(`^` + broker.NamePrefix + `_` + broker.RunIDForm + `_` + broker.CounterForm + `(_dlq|_adv)?$`)

// leaseTimeout bounds the answer of a live run's lease.
const leaseTimeout = 2 * time.Second

// Lease answers requests on subject drill.lease.ID while the run's
// connection lives: the server forgets the subscription with it.
func (c conn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	sub, err := c.nc.Subscribe(broker.LeaseName(".", runID), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, leaseTimeout)
	defer cancel()
	if err := c.nc.FlushWithContext(ctx); err != nil {
		return nil, err
	}
	return func(context.Context) error { _ = sub.Unsubscribe(); return nil }, nil // closing the connection ends it anyway
}

// live asks run's lease: an answer is a live run, "no responders" none; no
// answer at all is taken as live (clean leaves what it cannot be sure of).
func (c conn) live(ctx context.Context, run string) bool {
	ctx, cancel := context.WithTimeout(ctx, leaseTimeout)
	defer cancel()
	_, err := c.nc.RequestWithContext(ctx, broker.LeaseName(".", run), nil)
	return !errors.Is(err, nats.ErrNoResponders)
}

// Clean deletes the streams (their consumers with them) of runs whose lease
// does not answer.
func (c conn) Clean(ctx context.Context) (broker.Cleaned, error) {
	var out broker.Cleaned
	var names []string
	lister := c.js.StreamNames(ctx)
	for n := range lister.Name() {
		if leftoverStream().MatchString(n) {
			names = append(names, n)
		}
	}
	if err := lister.Err(); err != nil {
		return out, err
	}
	slices.Sort(names)
	live := broker.LiveRuns(func(run string) bool { return c.live(ctx, run) })
	for _, n := range names {
		if live(n) {
			out.Live = append(out.Live, n)
			continue
		}
		err := c.js.DeleteStream(ctx, n)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound): // gone meanwhile
		case err != nil:
			return out, fmt.Errorf("delete stream %s: %w", n, err)
		default:
			out.Dropped = append(out.Dropped, n)
		}
	}
	return out, nil
}
