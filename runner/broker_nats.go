package runner

import (
	"context"
	"fmt"
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
	return jsbroker.Options{Dedupe: sc.NATS.MsgID, DedupeWindow: sc.NATS.DedupeWindow, AckWait: sc.NATS.AckWait}
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
