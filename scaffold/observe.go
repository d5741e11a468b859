package scaffold

import (
	"context"
	"fmt"
	"github.com/outboxdrill/runner/proxy/fault"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/report"
	"github.com/outboxdrill/runner/scenario"
	"github.com/outboxdrill/runner/sysrun"
	"github.com/outboxdrill/runner/system"
)

// The probe event: its name (an id the outbox's column takes is made from
// it, as for any scenario), and an amount unlike any count.
const (
	probeName     = "init-7301"
	probeAmount   = 4217
	probeCurrency = "USD"
	// probeWait bounds the wait for the consumer's first row: one that
	// joins a group (Kafka, JetStream) takes seconds. Then the services
	// get probeSettle to finish (a mark, a read model written after).
	probeWait   = "20s"
	probeSettle = "1s"
)

// observation is what the probe's run showed: the result, what the
// services crossed and relayed, and the databases once it settled.
type observation struct {
	res        *report.Result
	crossings  []fault.Crossing
	told       map[string]string
	pubs, dels []*wireMsg
	after      [2]snapshot
	err        error // reading the databases failed
}

// wireMsg is one publish or delivery as a service's broker proxy relayed
// it, with the value of every field it carried (Redis), or of the
// headers init tried (elsewhere); "" keys the broker's own place.
type wireMsg struct {
	service string
	broker.WireMsg
	fields map[string]string
}

// headerNames are the headers tried for an event id where a message has
// headers (Kafka, NATS, RabbitMQ) and the broker's own place lacks it.
var headerNames = []string{"event_id", "event-id", "eventId", "eventID", "message_id", "message-id", "messageId", "id", "x-event-id"}

// probe runs the relay and the consumer of sys behind the proxies,
// fault-free, with the probe event in the outbox, until a consumer table
// gained a row (or the wait ran out), then lets them settle.
func (in *Init) probe(ctx context.Context, sys *system.System, f *found) (*observation, error) {
	src := fmt.Sprintf("name: runner init's probe\nsettle: %s\nsteps:\n  - produce(event=%s, amount=%d, currency=%s)\n  - start: relay\n  - start: consumer\n"+
		"  - expect: {sql: {db: consumer, query: %s, want: true}, within: %s}\n",
		probeSettle, probeName, probeAmount, probeCurrency, yq(gainedSQL(f)), probeWait)
	scs, errs := scenario.ParseContext(ctx, in.hidden("probe-scenario"), []byte(src), broker.Kinds())
	if len(errs) == 0 {
		errs = scs[0].UseSystem(sys)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("init's probe scenario does not load (a bug in init): %v", errs)
	}
	obs := &observation{}
	in.setHook(scs[0], func(run *sysrun.Run) func(*report.Result) {
		run.Observe()
		return func(res *report.Result) {
			obs.res, obs.crossings, obs.told = res, run.Crossings(), run.Told()
			obs.pubs, obs.dels = wireOf(run)
			obs.after, obs.err = in.readAfter(context.WithoutCancel(ctx), res.Where, f.cats)
		}
	})
	in.console.quiet()
	rep, err := in.session.Run(ctx, scs)
	in.console.loud()
	if err != nil {
		return nil, err
	}
	if obs.res == nil {
		if len(rep.Results) > 0 && !rep.Results[0].Passed() {
			return nil, fmt.Errorf("the probe could not run: %s", failures(rep.Results[0]))
		}
		return nil, fmt.Errorf("the probe did not run")
	}
	return obs, obs.err
}

// gainedSQL is true once a consumer table holds more rows than its
// schema left there: the consumer wrote something for the probe.
func gainedSQL(f *found) string {
	var terms []string
	n := 0
	for _, t := range f.cats[1].Tables {
		terms = append(terms, fmt.Sprintf("(SELECT count(*) FROM %s)", qualified(t)))
		n += len(f.before[1][t.Ref()])
	}
	if len(terms) == 0 {
		return "SELECT true"
	}
	return fmt.Sprintf("SELECT %s > %d", strings.Join(terms, " + "), n)
}

// readAfter snapshots the probe's databases (where: their names).
func (in *Init) readAfter(ctx context.Context, where [3]string, cats [2]*Catalog) ([2]snapshot, error) {
	var out [2]snapshot
	for i := range 2 {
		cfg, err := pgx.ParseConfig(in.pgURL)
		if err != nil {
			return out, redact.Err(in.pgURL, err)
		}
		cfg.Database = where[i]
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return out, fmt.Errorf("read what the probe left: %w", redact.Err(in.pgURL, err))
		}
		out[i], err = readRows(ctx, conn, cats[i])
		conn.Close(ctx)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// wireOf reads what every broker proxy of run relayed, with each field's
// (or tried header's) value.
func wireOf(run *sysrun.Run) (pubs, dels []*wireMsg) {
	base := run.Wires(broker.WireMap{})
	var names []string
	idx := make([][]*wireMsg, len(base)) // base[i]'s publishes, then its deliveries
	for i, sw := range base {
		for k, ms := range [][]broker.WireMsg{sw.Wire.Publishes, sw.Wire.Deliveries} {
			for _, m := range ms {
				w := &wireMsg{service: sw.Service, WireMsg: m, fields: map[string]string{"": m.EventID}}
				idx[i] = append(idx[i], w)
				if k == 0 {
					pubs = append(pubs, w)
				} else {
					dels = append(dels, w)
				}
				for _, f := range m.Fields {
					if !slices.Contains(names, f) {
						names = append(names, f)
					}
				}
			}
		}
	}
	fielded := len(names) > 0 // a wire that lists its fields (a Redis entry's)
	if !fielded {
		names = headerNames
	}
	for _, f := range names {
		for i, sw := range run.Wires(broker.WireMap{EventID: f}) {
			for j, m := range append(slices.Clone(sw.Wire.Publishes), sw.Wire.Deliveries...) {
				if j < len(idx[i]) && carries(fielded, m, f, idx[i][j].EventID) {
					idx[i][j].fields[f] = m.EventID
				}
			}
		}
	}
	return pubs, dels
}

func failures(res *report.Result) string {
	var out []string
	for _, f := range res.Failures {
		out = append(out, f.String())
	}
	return fmt.Sprint(out)
}

// carries reports whether m, read with field (or header) f as its event
// id, carried f: where a publish lists its fields (Redis), a delivery's
// is there when not empty; elsewhere the header gave another value than
// the broker's own place (base).
func carries(fielded bool, m broker.WireMsg, f, base string) bool {
	if fielded {
		return slices.Contains(m.Fields, f) || m.Fields == nil && m.EventID != ""
	}
	return m.EventID != base
}
