package world

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/proxy/listen"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/state"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/system"
)

// defaultConsumer is ${consumer} when the scenario's vars do not set it:
// the consume step's default consumer id.
const defaultConsumer = "accounting"

// AcquireSystem gives a scenario with a system file a database pair of its
// own with the team's schema (pooled pairs hold the reference schema), a
// new stream, and the team's services ready to start. The system file was
// checked (CheckSystems), which read its schema files for the whole run.
func (w *World) AcquireSystem(ctx context.Context, b string, sc *scenario.Scenario) (*Isolation, *sysrun.Run, error) {
	sys := sc.System.On(b) // its variants for this broker
	ck := w.checked(sys)
	if ck == nil {
		return nil, nil, fmt.Errorf("%s was not checked against its schema before its scenarios ran", sys.File)
	}
	n := int(w.seq.Add(1))
	base := fmt.Sprintf("%s_%s_%d", namePrefix, w.RunID, n)
	iso := &Isolation{Producer: base + "_p", Consumer: base + "_c", own: true, set: w.setOf(sc)}
	iso.StreamKey = fmt.Sprintf("%s:%s:%d", namePrefix, w.RunID, n)
	for side, name := range []*string{&iso.Producer, &iso.Consumer} {
		if err := w.ownDB(ctx, iso, side, name, schemaFiles(sys)[side], ck.ddl[side]); err != nil {
			return nil, nil, errors.Join(err, iso.release(false))
		}
	}
	br, err := w.newBroker(ctx, b, iso.StreamKey, sc)
	if err != nil {
		return nil, nil, errors.Join(&BrokerError{fmt.Errorf("%s: %w", b, err)}, iso.release(false))
	}
	if f, ok := br.(broker.Fielded); ok { // the team's entry layout, for publish and the stream checks
		f.UseFields(sys.Stream.EventID, sys.Stream.Payload)
	}
	iso.Env = steps.NewEnv(iso.pools[0], iso.pools[1], br)
	iso.Env.BrokerName, iso.Env.Control = b, control{w, b, iso.set}
	iso.Env.Consumers = sc.Consumers()
	iso.Env.Map = mapping(sys)
	iso.Env.EventIDs = ck.cat.EventIDs
	// The broker's own names (${stream}, ${topic}, ${queue}, ${group}, …)
	// for the scenario's consumer id; the scenario's vars may override any.
	vars, err := brokerNames(ctx, br, defaultConsumerOf(sc))
	if err != nil {
		return nil, nil, errors.Join(&BrokerError{fmt.Errorf("%s: %w", b, err)}, br.Delete(context.WithoutCancel(ctx)), iso.release(false))
	}
	vars["consumer"], vars["runner"] = defaultConsumer, runnerBinary()
	for k, v := range sc.Vars {
		vars[k] = v
	}
	run := sysrun.New(sysrun.Config{System: sys, Vars: vars, BrokerName: b, BrokerURL: w.brokerURL(b),
		ProducerURL: w.dbURL(iso.srv(producerSide), iso.Producer), ConsumerURL: w.dbURL(iso.srv(consumerSide), iso.Consumer),
		PGSlots: [2]*listen.Slots{w.svcSlots[iso.srv(producerSide)], w.svcSlots[iso.srv(consumerSide)]}})
	iso.Env.Services, iso.Env.System = run, sys
	// Closed first (LIFO): the services stop before their databases go.
	iso.close.add(run.Close)
	return iso, run, nil
}

// ownDB creates one side's database for a system scenario and applies the
// team's DDL (of ddlFile, "" none) to it.
//
// A database of the same DDL on the same server that an earlier scenario
// gave back, reset, is taken instead when there is one (reuse.go): *name
// is then its name.
func (w *World) ownDB(ctx context.Context, iso *Isolation, side int, name *string, ddlFile, ddl string) error {
	var drop cleanups // run unless the database is given back for reuse
	iso.drop.add(func(context.Context) error {
		if iso.given[side] {
			return nil
		}
		return drop.run()
	})
	key := reuseKey(iso.srv(side), ddl)
	reused := w.sysdb.take(key, iso.srv(side))
	iso.pgGen = w.pgGen[iso.set].Load()
	pool := reused.pool
	if pool != nil && reused.gen != iso.pgGen { // its server was restarted since
		pool.Close()
		pool = nil
	}
	if reused.name != "" {
		*name = reused.name
		if !w.managed {
			srv, db := iso.srv(side), reused.name
			drop.add(func(ctx context.Context) error { return w.dropDB(ctx, srv, db) })
		}
	} else if err := w.createDB(ctx, iso.srv(side), *name, &drop); err != nil {
		return err
	}
	if pool == nil {
		var err error
		if pool, err = w.poolOf(ctx, iso.srv(side), *name, systemPoolConns); err != nil {
			return err
		}
	}
	iso.pools[side] = pool
	iso.close.add(func(context.Context) error {
		if iso.lent[side] != pool { // a lent pool goes back with its database (giveBack)
			pool.Close()
		}
		return nil
	})
	if reused.name != "" {
		iso.reuse[side] = key
		return nil // its DDL ran when it was made
	}
	if ddl != "" {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("schema %s on %s: %w", ddlFile, *name, err)
		}
	}
	sh := w.sysdb.shape(key)
	if sh == nil { // the first of its key: what a new one looks like
		var err error
		if sh, err = inspect(ctx, pool); err != nil {
			return fmt.Errorf("read the schema %s made on %s: %w", ddlFile, *name, err)
		}
		w.sysdb.setShape(key, sh)
	}
	if sh.reusable {
		iso.reuse[side] = key
	}
	return nil
}

// dbURL is the URL of database db on server srv (World.pgURLs).
func (w *World) dbURL(srv int, db string) string {
	u, err := url.Parse(w.pgURLs[srv])
	if err != nil {
		return w.pgURLs[srv]
	}
	u.Path = "/" + db
	return u.String()
}

// mapping turns a system file's mappings into the checks' table mapping.
func mapping(sys *system.System) *state.Map {
	return &state.Map{Team: true,
		OutboxTable: sys.Outbox.Table, OutboxEventID: sys.Outbox.EventID, OutboxPayload: sys.Outbox.Payload, Unpublished: sys.Outbox.Unpublished,
		InboxTable: sys.Inbox.Table, InboxConsumer: sys.Inbox.Consumer, InboxEventID: sys.Inbox.EventID, InboxPayload: sys.Inbox.Payload,
		Projection: sys.Projection,
		AmountPath: sys.Event.AmountPath, CurrencyPath: sys.Event.CurrencyPath, EventIDPath: sys.Event.EventIDPath,
		AggregatePath: sys.Event.AggregatePath, VersionPath: sys.Event.VersionPath, AppliedOrder: sys.Inbox.AppliedOrder}
}

// runnerBinary is ${runner}: this runner's own executable (for `runner
// reference relay|consumer` services), or RUNNER_BIN when set (tests, whose
// executable is the test binary).
func runnerBinary() string {
	if b := os.Getenv("RUNNER_BIN"); b != "" {
		return b
	}
	b, _ := os.Executable()
	return b
}

// defaultConsumerOf is the scenario's ${consumer}.
func defaultConsumerOf(sc *scenario.Scenario) string {
	if c := sc.Vars["consumer"]; c != "" {
		return c
	}
	return defaultConsumer
}

// brokerNames are the placeholders that name the scenario's objects on the
// broker in use (its Kind.Placeholders), as the broker tells them
// (broker.Named): the very names the runner's own checks read, so that a
// service told them is the one the checks see. consumer is ${consumer},
// whose group ${group} (or queue) names.
func brokerNames(ctx context.Context, br broker.Broker, consumer string) (map[string]string, error) {
	if n, ok := br.(broker.Named); ok {
		return n.Placeholders(ctx, consumer)
	}
	return nil, fmt.Errorf("no placeholders known for a %T", br)
}
