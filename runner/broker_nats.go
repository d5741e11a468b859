package runner

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxdrill/runner/broker"
	jsbroker "github.com/outboxdrill/runner/broker/jetstream"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/servers"
)

func init() { brokerKinds[broker.NATS] = openNATS }

// natsConn is the run's NATS connection, and its server when the runner's own.
type natsConn struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	srv *servers.NATS
}

// openNATS connects for drills: a server a step killed is the answer, not a
// blip to wait out, so nothing is buffered while disconnected and
// reconnects are quick.
func openNATS(ctx context.Context, w *World, url string, p *Params) (brokerConn, error) {
	var c natsConn
	if url == "" {
		srv, err := servers.StartNATS(ctx, servers.NATSOptions{})
		if err != nil {
			return nil, err
		}
		w.undo.add(srv.Discard)
		c.srv, url = srv, srv.URL()
		p.logf("started NATS pid %d at %s in %s", srv.PID(), redact.URL(url), srv.Dir)
	}
	w.setBrokerURL(broker.NATS, url)
	nc, err := nats.Connect(url, nats.Name("outboxdrill"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", redact.URL(url), redact.Err(url, err))
	}
	w.undo.add(func(context.Context) error { nc.Close(); return nil })
	c.nc = nc
	c.js, err = jetstream.New(nc)
	return c, err
}

func (c natsConn) New(ctx context.Context, key string, sc *scenario.Scenario) (broker.Broker, error) {
	return jsbroker.New(ctx, c.js, key, natsOptions(sc))
}

// natsOptions are the scenario's JetStream options (its nats: key).
func natsOptions(sc *scenario.Scenario) jsbroker.Options {
	if sc == nil { // TakePair: no scenario, the defaults
		return jsbroker.Options{}
	}
	return jsbroker.Options{Dedupe: sc.NATS.MsgID, DedupeWindow: sc.NATS.DedupeWindow, AckWait: sc.NATS.AckWait, MaxDeliver: sc.BrokerDLQ}
}

func (c natsConn) Server() (proc, string) {
	if c.srv == nil {
		return nil, notOurs("NATS", "--nats")
	}
	return c.srv, ""
}

// Ready waits for the client's own reconnect.
func (c natsConn) Ready(ctx context.Context) error {
	for !c.nc.IsConnected() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Hints tell how to look at a kept scenario's stream (the nats CLI).
func (c natsConn) Hints(key string) []string {
	srv := c.nc.ConnectedUrlRedacted()
	return []string{
		"stream:      nats --server " + srv + " stream info " + key,
		"consumers:   nats --server " + srv + " consumer ls " + key,
	}
}

// leftoverStream is a scenario's stream or its dead letters: the runner's
// key drill:ID:N sanitized (broker/jetstream), and nothing else.
var leftoverStream = regexp.MustCompile(`^` + namePrefix + `_[0-9a-f]{8}_[0-9]+(_dlq|_adv)?$`)

// Lease answers requests on subject drill.lease.ID while the run's
// connection lives: the server forgets the subscription with it.
func (c natsConn) Lease(ctx context.Context, runID string) (func(context.Context) error, error) {
	sub, err := c.nc.Subscribe(leaseName(".", runID), func(m *nats.Msg) { _ = m.Respond(nil) })
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
func (c natsConn) live(ctx context.Context, run string) bool {
	ctx, cancel := context.WithTimeout(ctx, leaseTimeout)
	defer cancel()
	_, err := c.nc.RequestWithContext(ctx, leaseName(".", run), nil)
	return !errors.Is(err, nats.ErrNoResponders)
}

// Clean deletes the streams (their consumers with them) of runs whose lease
// does not answer.
func (c natsConn) Clean(ctx context.Context) (Cleaned, error) {
	var out Cleaned
	var names []string
	lister := c.js.StreamNames(ctx)
	for n := range lister.Name() {
		if leftoverStream.MatchString(n) {
			names = append(names, n)
		}
	}
	if err := lister.Err(); err != nil {
		return out, err
	}
	slices.Sort(names)
	live := map[string]bool{}
	for _, n := range names {
		run := runOf(n)
		l, seen := live[run]
		if !seen {
			l = c.live(ctx, run)
			live[run] = l
		}
		if l {
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
