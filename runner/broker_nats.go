package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gopkg.in/yaml.v3"

	"outboxdrill/broker"
	jsbroker "outboxdrill/broker/jetstream"
	"outboxdrill/diag"
	"outboxdrill/servers"
	"outboxdrill/steps"
)

// The nats: top-level key tunes a scenario's JetStream stream; it lives
// beside the NATS broker kind, not in the loader.
func init() {
	brokerKinds[broker.NATS] = openNATS
	defineTopKey(&topKey{Name: "nats",
		Doc: "this scenario's JetStream stream: `msg_id` (relay publishes carry Nats-Msg-Id = event id; default true), `dedupe_window` (default 2m), `ack_wait` (redelivery after, default 1s)",
		parse: func(file string, kv steps.Arg, h *header, errs *diag.Errors) {
			h.BrokerOptions["nats"] = parseNATS(file, kv.Value, errs)
		},
		schema: func() map[string]any {
			return map[string]any{"type": "object", "additionalProperties": false, "description": "this scenario's JetStream stream",
				"properties": map[string]any{
					"msg_id":        map[string]any{"type": "boolean", "description": "relay publishes carry Nats-Msg-Id = event id (default true)"},
					"dedupe_window": steps.DurationSchema(),
					"ack_wait":      steps.DurationSchema(),
				}}
		}})
}

// natsOptions are the scenario's JetStream options (nats:), or the defaults.
func natsOptions(sc *Scenario) jsbroker.Options {
	if o, ok := sc.BrokerOptions["nats"].(jsbroker.Options); ok {
		return o
	}
	return jsbroker.Options{Dedupe: true}
}

// natsKeys are the keys of the top-level nats: map.
var natsKeys = []string{"msg_id", "dedupe_window", "ack_wait"}

// parseNATS reads nats: {msg_id: false, dedupe_window: 1s, ack_wait: 500ms}.
func parseNATS(file string, n *yaml.Node, errs *diag.Errors) jsbroker.Options {
	opt := jsbroker.Options{Dedupe: true}
	if n.Kind != yaml.MappingNode {
		*errs = append(*errs, diag.Errorf(diag.NodePos(file, n), "nats: want a map with %s", strings.Join(natsKeys, ", ")))
		return opt
	}
	for _, kv := range pairs(file, n, errs) {
		pos := diag.NodePos(file, kv.Value)
		var err error
		switch kv.Key {
		case "msg_id":
			err = kv.Value.Decode(&opt.Dedupe)
			if kv.Value.ShortTag() != "!!bool" {
				err = fmt.Errorf("want true or false, got %s", diag.Describe(kv.Value))
			}
		case "dedupe_window":
			opt.DedupeWindow, err = steps.Duration(kv.Value)
		case "ack_wait":
			opt.AckWait, err = steps.Duration(kv.Value)
		default:
			*errs = append(*errs, diag.Errorf(kv.KeyPos, "nats: unknown key %q%s; known: %s", kv.Key, diag.Suggest(kv.Key, natsKeys), strings.Join(natsKeys, ", ")))
			continue
		}
		if err != nil {
			*errs = append(*errs, diag.Errorf(pos, "nats: %s: %v", kv.Key, err))
		}
	}
	return opt
}

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
		p.logf("started NATS pid %d at %s in %s", srv.PID(), url, srv.Dir)
	}
	nc, err := nats.Connect(url, nats.Name("outboxdrill"), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	w.undo.add(func(context.Context) error { nc.Close(); return nil })
	c.nc = nc
	c.js, err = jetstream.New(nc)
	return c, err
}

func (c natsConn) New(ctx context.Context, key string, sc *Scenario) (broker.Broker, error) {
	return jsbroker.New(ctx, c.js, key, natsOptions(sc))
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
