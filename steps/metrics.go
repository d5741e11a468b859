package steps

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/state"

	"gopkg.in/yaml.v3"
)

// comparison is a wanted value written as "< 5s", ">= 1", "== 0": for
// metrics whose exact value depends on timing.
type comparison struct {
	Op    string
	Value any // int64 or time.Duration, like the metric
}

func (c comparison) String() string { return fmt.Sprintf("%s %v", c.Op, c.Value) }

// holds reports whether got satisfies the comparison.
func (c comparison) holds(got any) bool {
	var a, b int64
	switch g := got.(type) {
	case int64:
		a, b = g, c.Value.(int64)
	case time.Duration:
		a, b = int64(g), int64(c.Value.(time.Duration))
	default:
		return false
	}
	switch c.Op {
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	case "!=":
		return a != b
	}
	return a == b
}

var comparisonRe = lazy.Regexp(`^\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$`)

// parseMetric reads an exact value or a comparison; dur says whether the
// metric is a duration.
func parseMetric(file string, n *yaml.Node, dur bool) (any, diag.Errors) {
	if n.Kind != yaml.ScalarNode {
		return nil, diag.Errors{diag.Errorf(diag.NodePos(file, n), "want a value or a comparison such as \"< 5s\", got %s", diag.Describe(n))}
	}
	op, text := "==", strings.TrimSpace(n.Value)
	if m := comparisonRe().FindStringSubmatch(n.Value); m != nil {
		op, text = m[1], m[2]
	}
	var v any
	if dur {
		d, err := parseDuration(text)
		if err != nil {
			return nil, diag.Errors{diag.Errorf(diag.NodePos(file, n), "%v", err)}
		}
		v = d
	} else {
		i, err := strconv.ParseInt(text, 10, 64)
		if err != nil || i < 0 {
			return nil, diag.Errors{diag.Errorf(diag.NodePos(file, n), "want a count or a comparison such as \">= 1\", got %s", diag.Describe(n))}
		}
		v = i
	}
	if op == "==" {
		return v, nil
	}
	return comparison{Op: op, Value: v}, nil
}

const comparisonPattern = `^\s*(<=|>=|==|!=|<|>)?\s*`

// Value kinds of the metrics: a count or a duration, exact or compared.
var (
	kindCountMetric = ValueKind{"count, or a comparison such as \">= 1\"",
		func(file string, n *yaml.Node) (any, diag.Errors) { return parseMetric(file, n, false) },
		func() map[string]any {
			return anyOf(map[string]any{"type": "integer", "minimum": 0},
				map[string]any{"type": "string", "pattern": comparisonPattern + `[0-9]+\s*$`}, VarRef())
		}}
	KindDurationMetric = ValueKind{"duration, or a comparison such as \"< 5s\"",
		func(file string, n *yaml.Node) (any, diag.Errors) { return parseMetric(file, n, true) },
		func() map[string]any {
			return anyOf(map[string]any{"const": 0},
				map[string]any{"type": "string", "pattern": comparisonPattern + `(0|([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+)\s*$`}, VarRef())
		}}
)

// metricChecks are the operator's metrics.* checks.
func metricChecks() (cs []*Check) {
	defineCheck := func(c *Check) { cs = append(cs, c) }
	metric := func(name, doc string, kind ValueKind, observe func(context.Context, *Env) (any, error), needs ...broker.Capability) {
		var need broker.Capability
		if len(needs) > 0 {
			need = needs[0]
		}
		defineCheck(&Check{Name: "metrics." + name, Doc: doc, Value: kind, Needs: need,
			observe: func(ctx context.Context, env *Env, _ any) (any, error) { return observe(ctx, env) }})
	}
	metric("unpublished", "outbox rows waiting for the relay (with the CDC relay: events committed after the slot's confirmed LSN)", kindCountMetric, unpublished)
	slot := func(read func(cdc.Stats) int64) func(context.Context, *Env) (any, error) {
		return func(ctx context.Context, env *Env) (any, error) {
			if env.CDC == nil {
				return nil, fmt.Errorf("no replication slot: the scenario has no relay with mode cdc")
			}
			st, err := env.CDC.Stats(ctx)
			return read(st), err
		}
	}
	metric("cdc_lag_bytes", "bytes of WAL between the slot's confirmed LSN and the current WAL position (pg_wal_lsn_diff): how far the CDC relay is behind", kindCountMetric, slot(func(st cdc.Stats) int64 { return st.LagBytes }))
	metric("cdc_retained_wal", "bytes of WAL the slot keeps from being removed (current WAL position − restart_lsn): grows while nobody reads the slot, until the disk fills", kindCountMetric, slot(func(st cdc.Stats) int64 { return st.Retained }))
	metric("cdc_slot_active", "1 while a relay is attached to the slot, else 0 (0 when the slot does not exist)", kindCountMetric, slot(func(st cdc.Stats) int64 {
		if st.Active {
			return 1
		}
		return 0
	}))
	metric("cdc_lag_events", "outbox events committed after the slot's confirmed LSN: what the CDC relay has yet to publish and confirm", kindCountMetric, func(ctx context.Context, env *Env) (any, error) {
		if env.CDC == nil {
			return nil, fmt.Errorf("no replication slot: the scenario has no relay with mode cdc")
		}
		evs, err := env.CDC.Pending(ctx)
		return int64(len(evs)), err
	})
	metric("outbox_oldest_age", "age of the oldest unpublished outbox row (0 when none; with the CDC relay, of the oldest event still in the slot), on the producer PostgreSQL's clock: now() minus the row's created_at, the start of the transaction that produced it", KindDurationMetric, func(ctx context.Context, env *Env) (any, error) {
		var us int64
		var err error
		if env.CDC != nil {
			evs, perr := env.CDC.Pending(ctx)
			if perr != nil {
				return nil, perr
			}
			ids := make([]string, len(evs))
			for i, ev := range evs {
				ids[i] = ev.EventID
			}
			err = env.Producer.QueryRow(ctx, `SELECT coalesce((extract(epoch FROM now() - min(created_at)) * 1e6)::bigint, 0) FROM outbox WHERE event_id = ANY($1)`, ids).Scan(&us)
		} else {
			err = env.Producer.QueryRow(ctx, `SELECT coalesce((extract(epoch FROM now() - min(created_at)) * 1e6)::bigint, 0) FROM outbox WHERE NOT published`).Scan(&us)
		}
		return time.Duration(us) * time.Microsecond, err
	})
	metric("pel_oldest_idle", "longest idle time of a pending entry, any group (0 when none), as the broker counts it: Redis XPENDING's idle time since the entry was last delivered (by a read or a claim), on the Redis server's clock", KindDurationMetric, func(ctx context.Context, env *Env) (any, error) {
		st, err := env.Broker.PendingStats(ctx)
		return st.OldestIdle, err
	}, broker.PendingList)
	metric("redeliveries", "deliveries beyond the first of the entries still pending, all groups", kindCountMetric, func(ctx context.Context, env *Env) (any, error) {
		st, err := env.Broker.PendingStats(ctx)
		return st.Redeliveries, err
	}, broker.PendingCount)
	metric("inbox_conflicts", "identity conflicts consume and claim reported in this scenario", kindCountMetric, func(_ context.Context, env *Env) (any, error) {
		return env.conflicts, nil
	})
	metric("projection_lag", "committed events the most-behind consumer id has not applied yet (its inbox lacks them; with a system file, its outbox and inbox as the file maps them); 0 when every projection is caught up. Consumer ids are those the scenario's consume and claim steps name, and any with an inbox row", kindCountMetric, func(ctx context.Context, env *Env) (any, error) {
		// A team's system's outbox and inbox, where its file maps them.
		lag, _, err := projectionLag(ctx, env, env.Mapping())
		return lag, err
	})
	metric("projection_watermark_age", "the projection's staleness: age of the oldest committed event some consumer id has not applied (0 when caught up), on the producer PostgreSQL's clock: now() minus its outbox row's created_at. Consumer ids as for projection_lag", KindDurationMetric, func(ctx context.Context, env *Env) (any, error) {
		_, age, err := projectionLag(ctx, env, state.Reference) // created_at: the reference outbox's
		return age, err
	})
	metric("dlq", "entries in the dead-letter stream", kindCountMetric, func(ctx context.Context, env *Env) (any, error) {
		dls, err := env.Broker.DeadLetters(ctx)
		return int64(len(dls)), err
	})
	return cs
}

// projectionLag compares the producer's committed events with each consumer
// id's inbox (two databases: no join). Consumer ids are those the scenario
// names (env.Consumers) and those with an inbox row; with neither, the
// default one. A named id with no row yet is the most behind of all, which
// counting only ids with rows would hide. m says where the outbox and the
// inbox are (a team's outbox gives no age: it has no created_at).
func projectionLag(ctx context.Context, env *Env, m state.Map) (int64, time.Duration, error) {
	outbox, err := state.OutboxOf(ctx, env.Producer, m)
	if err != nil {
		return 0, 0, err
	}
	applied, err := state.InboxesOf(ctx, env.Consumer, m)
	if err != nil {
		return 0, 0, err
	}
	for _, c := range env.Consumers {
		if applied[c] == nil {
			applied[c] = map[string]string{}
		}
	}
	if len(applied) == 0 {
		applied[DefaultConsumer] = map[string]string{}
	}
	var lag int64
	var age time.Duration
	for _, seen := range applied {
		var n int64
		for _, e := range outbox {
			if _, ok := seen[e.EventID]; !ok {
				n++
				age = max(age, e.Age)
			}
		}
		lag = max(lag, n)
	}
	return lag, age, nil
}

// unpublished counts what the relay has yet to publish: outbox rows not
// marked published, or, with the CDC relay, the events still in its slot.
func unpublished(ctx context.Context, env *Env) (any, error) {
	if env.CDC != nil {
		evs, err := env.CDC.Pending(ctx)
		return int64(len(evs)), err
	}
	var n int64
	err := env.Producer.QueryRow(ctx, env.Mapping().CountUnpublished()).Scan(&n)
	return n, err
}
