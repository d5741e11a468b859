package runner

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/proxy/listen"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/state"
	"github.com/outboxdrill/runner/steps"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/system"
)

// defaultConsumer is ${consumer} when the scenario's vars do not set it:
// the consume step's default consumer id.
const defaultConsumer = "accounting"

// acquireSystem gives a scenario with a system file a database pair of its
// own with the team's schema (pooled pairs hold the reference schema), a
// new stream, and the team's services ready to start.
func (w *World) acquireSystem(ctx context.Context, b string, sc *scenario.Scenario) (*isolation, *sysrun.Run, error) {
	sys := sc.System.On(b) // its variants for this broker
	n := int(w.seq.Add(1))
	base := fmt.Sprintf("%s_%s_%d", namePrefix, w.RunID, n)
	iso := &isolation{producer: base + "_p", consumer: base + "_c", own: true, set: w.setOf(sc)}
	iso.streamKey = fmt.Sprintf("%s:%s:%d", namePrefix, w.RunID, n)
	for i, db := range []struct{ name, ddl, key string }{{iso.producer, sys.Schema.Producer, "schema.producer"}, {iso.consumer, sys.Schema.Consumer, "schema.consumer"}} {
		if err := w.ownDB(ctx, iso, i, db.name, sys, db.key, db.ddl); err != nil {
			return nil, nil, errors.Join(err, iso.release(false))
		}
	}
	br, err := w.newBroker(ctx, b, iso.streamKey, sc)
	if err != nil {
		return nil, nil, errors.Join(&brokerError{fmt.Errorf("%s: %w", b, err)}, iso.release(false))
	}
	if f, ok := br.(broker.Fielded); ok { // the team's entry layout, for publish and the stream checks
		f.UseFields(sys.Stream.EventID, sys.Stream.Payload)
	}
	iso.env = steps.NewEnv(iso.pools[0], iso.pools[1], br)
	iso.env.BrokerName, iso.env.Control = b, control{w, b, iso.set}
	iso.env.Consumers = sc.Consumers()
	iso.env.Map = mapping(sys)
	if cat := w.catalogs[systemKey(sys)]; cat != nil {
		iso.env.EventIDs = cat.EventIDs
	}
	// The broker's own names (${stream}, ${topic}, ${queue}, ${group}, …)
	// for the scenario's consumer id; the scenario's vars may override any.
	vars, err := brokerNames(ctx, br, defaultConsumerOf(sc))
	if err != nil {
		return nil, nil, errors.Join(&brokerError{fmt.Errorf("%s: %w", b, err)}, br.Delete(context.WithoutCancel(ctx)), iso.release(false))
	}
	vars["consumer"], vars["runner"] = defaultConsumer, runnerBinary()
	for k, v := range sc.Vars {
		vars[k] = v
	}
	run := sysrun.New(sysrun.Config{System: sys, Vars: vars, BrokerName: b, BrokerURL: w.brokerURL(b),
		ProducerURL: w.dbURL(iso.srv(producerSide), iso.producer), ConsumerURL: w.dbURL(iso.srv(consumerSide), iso.consumer),
		PGSlots: [2]*listen.Slots{w.svcSlots[iso.srv(producerSide)], w.svcSlots[iso.srv(consumerSide)]}})
	iso.env.Services, iso.env.System = run, sys
	// Closed first (LIFO): the services stop before their databases go.
	iso.close.add(run.Close)
	return iso, run, nil
}

// ownDB creates one side's database for a system scenario and applies the
// team's DDL file (sys's key) to it.
func (w *World) ownDB(ctx context.Context, iso *isolation, side int, name string, sys *system.System, key, ddlFile string) error {
	ddl := ""
	if ddlFile != "" {
		var err error
		if ddl, err = readSchema(ctx, sys, key, ddlFile); err != nil {
			return err
		}
	}
	if err := w.createDB(ctx, iso.srv(side), name, &iso.drop); err != nil {
		return err
	}
	pool, err := w.pool(ctx, iso.srv(side), name)
	if err != nil {
		return err
	}
	iso.pools[side] = pool
	iso.close.add(func(context.Context) error { pool.Close(); return nil })
	if ddl != "" {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("schema %s on %s: %w", ddlFile, name, err)
		}
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
		AmountPath: sys.Event.AmountPath, CurrencyPath: sys.Event.CurrencyPath, EventIDPath: sys.Event.EventIDPath}
}

// finishSystem judges the faults the scenario armed (one that never struck
// fails it; one that could not be classified exactly skips it) and the
// entries the services published: an XADD without a field the system
// file's stream mapping names fails the scenario, saying so.
func finishSystem(run *sysrun.Run, res *report.Result) {
	if run == nil {
		return
	}
	if res.Skipped == "" && res.Passed() {
		var skip *steps.SkipError
		switch err := run.Unstruck(); {
		case errors.As(err, &skip):
			res.Skipped = fmt.Sprintf("%s: %s", res.Scenario.SystemPos, skip.Reason)
		case err != nil:
			res.Failures = append(res.Failures, steps.Failure{Pos: startPos(res.Scenario), Key: "fault", Msg: err.Error()})
		}
	}
	if res.Skipped == "" {
		for _, err := range run.FieldProblems() {
			res.Failures = append(res.Failures, steps.Failure{Pos: res.Scenario.Pos, Key: fieldsKey, Msg: err.Error()})
		}
	}
}

// fieldsKey is the failure of an entry without a field the stream mapping
// names.
const fieldsKey = "stream"

// fieldsMismatch reports whether the services published entries the
// stream mapping cannot read: a history read through it would blame the
// consumer (an event id "" acked without effect) for the mapping's fault.
func fieldsMismatch(res *report.Result) bool {
	for _, f := range res.Failures {
		if f.Key == fieldsKey && f.Pos == res.Scenario.Pos {
			return true
		}
	}
	return false
}

// servicesSaid is what each process of the team's services wrote, the
// killed ones too, labelled by the start step that started it: shown with
// a failure, and with -v for a passing scenario.
func servicesSaid(run *sysrun.Run) []report.ServiceOutput {
	if run == nil {
		return nil
	}
	var out []report.ServiceOutput
	for _, o := range run.Outputs() {
		out = append(out, report.ServiceOutput{Service: o.Service, Start: o.Start.String(), Fault: o.Fault, PID: o.PID, Ended: o.Ended, Output: o.Text})
	}
	return out
}

// startPos is where the scenario's first fault was armed.
func startPos(sc *scenario.Scenario) diag.Pos {
	for _, c := range sc.Steps {
		if c.Def.Name == "start" && c.ParamValues()["fault"] != nil {
			return c.Pos
		}
	}
	return sc.SystemPos
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
