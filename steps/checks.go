package steps

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/state"
)

// Check defines one state check of an expect map: how its wanted value is
// written (parse) and how the current state is read (observe). observe shapes
// what it reads like want (a total for an int, a map for a map) so that the
// two compare directly.
type Check struct {
	Name  string
	Doc   string
	Value ValueKind // how the wanted value is written
	// Needs is what the broker must be able to tell for this check ("":
	// nothing); on a broker without it the check is n/a, reported with the
	// broker's documented reason, and the scenario runs on.
	Needs broker.Capability

	observe func(ctx context.Context, env *Env, want any) (any, error)
}

// ValueKind is one way a check's wanted value is written: its reference
// text, its parser and its JSON Schema, kept together.
type ValueKind struct {
	Doc    string
	parse  func(file string, n *yaml.Node) (any, diag.Errors)
	Schema func() map[string]any
}

// Type is how the value is written, for the reference.
func (c *Check) Type() string { return c.Value.Doc }

func (c *Check) parse(file string, n *yaml.Node) (any, diag.Errors) { return c.Value.parse(file, n) }

// The value kinds of the state checks. VarRef lets a ${variable} stand
// where a number goes.
var (
	kindCount = ValueKind{"integer", parseCount, func() map[string]any {
		return anyOf(map[string]any{"type": "integer", "minimum": 0}, VarRef())
	}}
	KindCountOrMap = ValueKind{"integer, or map consumer → integer", parseCountOrMap, func() map[string]any {
		return anyOf(kindCount.Schema(), mapOf(kindCount.Schema()))
	}}
	KindProjection = ValueKind{"map consumer → currency → {amount: integer, events: integer}", parseProjection, func() map[string]any {
		row := map[string]any{"type": "object", "required": []string{"amount", "events"}, "additionalProperties": false,
			"properties": map[string]any{"amount": anyOf(map[string]any{"type": "integer"}, VarRef()), "events": kindCount.Schema()}}
		return mapOf(mapOf(row))
	}}
	KindBalances = ValueKind{"map account → currency → integer", parseBalances, func() map[string]any {
		return mapOf(mapOf(anyOf(map[string]any{"type": "integer"}, VarRef())))
	}}
)

// VarRef is the schema of a value that is exactly "${name}".
func VarRef() map[string]any { return varRefSchema() }

func anyOf(schemas ...map[string]any) map[string]any { return map[string]any{"anyOf": schemas} }

func mapOf(values map[string]any) map[string]any {
	return map[string]any{"type": "object", "additionalProperties": values}
}

// ProjectionRow is one (consumer, currency) row of the projection.
type ProjectionRow = state.Sum

// checks holds the state checks by key: each file's list, named here;
// built on first use, as registry is.
var checks = lazy.Value("state checks", func() map[string]*Check {
	m := map[string]*Check{}
	for _, c := range slices.Concat(stateChecks(), metricChecks(), []*Check{sqlCheck}) {
		m[c.Name] = c
	}
	return m
})

// Checks lists the state checks in key order.
func Checks() []*Check {
	var cs []*Check
	for _, n := range CheckNames() {
		cs = append(cs, checks()[n])
	}
	return cs
}

// CheckNames lists the state-check keys, sorted.
func CheckNames() []string {
	names := make([]string, 0, len(checks()))
	for n := range checks() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// countSQL makes a check that counts rows with a query on one database.
func countSQL(name, doc, query string, consumerDB bool) *Check {
	return &Check{Name: name, Doc: doc, Value: kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) {
			db := env.Producer
			if consumerDB {
				db = env.Consumer
			}
			var n int64
			err := db.QueryRow(ctx, query).Scan(&n)
			return n, err
		}}
}

// mappedCount makes a check that counts rows with a query the scenario's
// table mapping gives (the reference's, or a system file's).
func mappedCount(name, doc string, query func(state.Map) string) *Check {
	return &Check{Name: name, Doc: doc, Value: kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) {
			var n int64
			err := env.Producer.QueryRow(ctx, query(env.Mapping())).Scan(&n)
			return n, err
		}}
}

// referenceOnly makes a check on a reference table read-only on the
// reference schema: a team's system file maps no such table.
func referenceOnly(c *Check) *Check {
	observe := c.observe
	c.observe = func(ctx context.Context, env *Env, want any) (any, error) {
		if env.Mapping().Team {
			return nil, fmt.Errorf("%s reads the reference pipeline's tables; a system file maps only the outbox, the inbox and the projection: use a sql: check", c.Name)
		}
		return observe(ctx, env, want)
	}
	return c
}

// stateChecks are the checks of the stream, the dead letters, the tables
// and the projection.
func stateChecks() (cs []*Check) {
	defineCheck := func(c *Check) { cs = append(cs, c) }
	defineCheck(&Check{Name: "stream.entries", Needs: broker.EntryLog, Doc: "entries in the stream (XLEN): every publish counts, duplicates too. " +
		"Kafka: the records a read_committed consumer gets, so a transactional producer's commit and abort markers, its aborted records and those of a transaction still open are not entries",
		Value:   kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) { return env.Broker.Entries(ctx) }})
	defineCheck(&Check{Name: "stream.events", Needs: broker.EntryLog, Doc: "distinct business event ids among the stream's entries",
		Value: kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) {
			ids, err := env.Broker.Events(ctx)
			distinct := map[string]bool{}
			for _, id := range ids {
				distinct[id] = true
			}
			return int64(len(distinct)), err
		}})
	defineCheck(&Check{Name: "stream.pending", Needs: broker.PendingCount, Doc: "delivered but unacknowledged entries (the PEL): a total over all consumer groups, or a map consumer → count",
		Value: KindCountOrMap,
		observe: func(ctx context.Context, env *Env, want any) (any, error) {
			m, err := env.Broker.Pending(ctx)
			return shapeCounts(m, want), err
		}})
	defineCheck(&Check{Name: "stream.lag", Needs: broker.GroupLag, Doc: "entries a consumer group has not finished with, as the broker counts them: not yet delivered, or delivered and not acknowledged; " +
		"a total over the groups, or a map consumer → count. Redis: XINFO GROUPS lag plus pending; NATS: the consumer's NumPending plus NumAckPending; " +
		"Kafka: the records a read_committed consumer of the group can still get, from its committed offset (from the log start where it committed nothing) to the last stable offset, transaction markers and aborted records not counted. " +
		"Every group the broker knows for the scenario counts, a team's services' own too (its ${group}); a group that does not exist counts 0",
		Value: KindCountOrMap,
		observe: func(ctx context.Context, env *Env, want any) (any, error) {
			lb, ok := env.Broker.(broker.Lagging)
			if !ok {
				return nil, broker.Unsupported(env.BrokerName, broker.GroupLag)
			}
			m, err := lb.Lag(ctx)
			return shapeCounts(m, want), err
		}})
	defineCheck(&Check{Name: "stream.outputs", Needs: broker.BrokerTxn, Doc: "records a reader of committed broker transactions (read_committed) sees in the consumer's output (consume with broker_txn)",
		Value: kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) {
			tb, ok := env.Broker.(broker.Transactions)
			if !ok {
				return nil, broker.Unsupported(env.BrokerName, broker.BrokerTxn)
			}
			ids, err := tb.Outputs(ctx)
			return int64(len(ids)), err
		}})
	defineCheck(&Check{Name: "dlq.entries", Doc: "entries in the dead-letter stream", Value: kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) {
			dls, err := env.Broker.DeadLetters(ctx)
			return int64(len(dls)), err
		}})
	defineCheck(referenceOnly(countSQL("ordering.gaps", "events held back by strict ordering, waiting for a predecessor", `SELECT count(*) FROM held`, true)))
	defineCheck(mappedCount("outbox.rows", "rows in the outbox, published or not", state.Map.CountOutbox))
	defineCheck(&Check{Name: "outbox.unpublished", Doc: "outbox rows not yet marked published (with a system file: its outbox.unpublished condition; with the CDC relay, which marks nothing: events committed after the replication slot's confirmed LSN, read by peeking at the slot)",
		Value:   kindCount,
		observe: func(ctx context.Context, env *Env, _ any) (any, error) { return unpublished(ctx, env) }})
	defineCheck(referenceOnly(countSQL("journal.rows", "committed transfers in the producer's journal", `SELECT count(*) FROM journal`, false)))
	defineCheck(referenceOnly(countSQL("ledger.rows", "ledger entries (two per committed transfer)", `SELECT count(*) FROM ledger_entries`, false)))
	defineCheck(&Check{Name: "inbox.rows", Doc: "rows in the consumer's inbox: a total, or a map consumer → count",
		Value: KindCountOrMap,
		observe: func(ctx context.Context, env *Env, want any) (any, error) {
			m, err := queryCounts(ctx, env, env.Mapping().InboxCounts())
			return shapeCounts(m, want), err
		}})
	defineCheck(&Check{Name: "projection", Doc: "the whole projection: map consumer → currency → {amount, events}; {} means empty",
		Value:   KindProjection,
		observe: observeProjection})
	defineCheck(referenceOnly(&Check{Name: "balances", Doc: "every account balance on the producer side: map account → currency → integer (accounts at 0 may be left out)",
		Value:   KindBalances,
		observe: observeBalances}))
	return cs
}

func queryCounts(ctx context.Context, env *Env, query string) (map[string]int64, error) {
	rows, err := env.Consumer.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		m[k] = n
	}
	return m, rows.Err()
}

// shapeCounts returns the total when want is a number, else the map without
// zero entries (a consumer with 0 pending is the same as one not listed).
func shapeCounts(m map[string]int64, want any) any {
	if _, total := want.(int64); total {
		var sum int64
		for _, n := range m {
			sum += n
		}
		return sum
	}
	out := map[string]int64{}
	for k, n := range m {
		if n != 0 {
			out[k] = n
		}
	}
	return out
}

func observeProjection(ctx context.Context, env *Env, _ any) (any, error) {
	return state.ProjectionsOf(ctx, env.Consumer, env.Mapping())
}

func observeBalances(ctx context.Context, env *Env, _ any) (any, error) {
	rows, err := env.Producer.Query(ctx, `SELECT account, currency, balance FROM accounts WHERE balance <> 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]int64{}
	for rows.Next() {
		var a, cur string
		var b int64
		if err := rows.Scan(&a, &cur, &b); err != nil {
			return nil, err
		}
		if out[a] == nil {
			out[a] = map[string]int64{}
		}
		out[a][cur] = b
	}
	return out, rows.Err()
}

// --- parsing wanted values ---

func parseCount(file string, n *yaml.Node) (any, diag.Errors) {
	i, err := scalarInt(file, n, false)
	if err != nil {
		return nil, diag.Errors{err}
	}
	return i, nil
}

func parseCountOrMap(file string, n *yaml.Node) (any, diag.Errors) {
	if n.Kind != yaml.MappingNode {
		return parseCount(file, n)
	}
	out := map[string]int64{}
	errs := eachPair(file, n, func(k string, v *yaml.Node) *diag.Error {
		i, err := scalarInt(file, v, false)
		if err == nil && i != 0 {
			out[k] = i
		}
		return err
	})
	return out, errs
}

func parseBalances(file string, n *yaml.Node) (any, diag.Errors) {
	out := map[string]map[string]int64{}
	errs := eachPair(file, n, func(account string, v *yaml.Node) *diag.Error {
		cur := map[string]int64{}
		inner := eachPair(file, v, func(c string, v *yaml.Node) *diag.Error {
			i, err := scalarInt(file, v, true)
			if err == nil && i != 0 {
				cur[c] = i
			}
			return err
		})
		if len(cur) > 0 {
			out[account] = cur
		}
		return first(inner)
	})
	return out, errs
}

func parseProjection(file string, n *yaml.Node) (any, diag.Errors) {
	out := map[string]map[string]ProjectionRow{}
	errs := eachPair(file, n, func(consumer string, v *yaml.Node) *diag.Error {
		rows := map[string]ProjectionRow{}
		inner := eachPair(file, v, func(cur string, v *yaml.Node) *diag.Error {
			r, err := parseRow(file, v)
			if r != (ProjectionRow{}) { // {amount: 0, events: 0}: no row, as a count of 0 is none
				rows[cur] = r
			}
			return err
		})
		if len(rows) > 0 { // {accounting: {}} is the same as not listing accounting
			out[consumer] = rows
		}
		return first(inner)
	})
	return out, errs
}

func parseRow(file string, n *yaml.Node) (ProjectionRow, *diag.Error) {
	var r ProjectionRow
	seen := map[string]bool{}
	err := first(eachPair(file, n, func(k string, v *yaml.Node) *diag.Error {
		var dst *int64
		switch k {
		case "amount":
			dst = &r.Amount
		case "events":
			dst = &r.Events
		default:
			return diag.Errorf(diag.NodePos(file, v), "unknown projection field %q%s; a row is {amount, events}", k, diag.Suggest(k, []string{"amount", "events"}))
		}
		seen[k] = true
		i, err := scalarInt(file, v, false)
		*dst = i
		return err
	}))
	if err == nil && (!seen["amount"] || !seen["events"]) {
		err = diag.Errorf(diag.NodePos(file, n), "a projection row needs both amount and events, e.g. {amount: 100, events: 1}")
	}
	return r, err
}

// eachPair walks a mapping node, rejecting anything else and duplicate keys.
func eachPair(file string, n *yaml.Node, fn func(key string, v *yaml.Node) *diag.Error) diag.Errors {
	if n.Kind != yaml.MappingNode {
		return diag.Errors{diag.Errorf(diag.NodePos(file, n), "want a map, got a %s", diag.KindName(n))}
	}
	var errs diag.Errors
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			errs = append(errs, diag.Errorf(diag.NodePos(file, k), "key %q given twice", k.Value))
			continue
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// scalarInt reads an integer from a scalar's text, quoted or not, as
// parameters do.
func scalarInt(file string, n *yaml.Node, negative bool) (int64, *diag.Error) {
	if n.Kind != yaml.ScalarNode {
		return 0, diag.Errorf(diag.NodePos(file, n), "want an integer, got %s", diag.Describe(n))
	}
	i, err := strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	if err != nil {
		return 0, diag.Errorf(diag.NodePos(file, n), "want an integer, got %s", diag.Describe(n))
	}
	if i < 0 && !negative {
		return 0, diag.Errorf(diag.NodePos(file, n), "want a count (0 or more), got %d", i)
	}
	return i, nil
}

func first(es diag.Errors) *diag.Error {
	if len(es) == 0 {
		return nil
	}
	return es[0]
}
