// Package steps holds the scenario step vocabulary: one registry from step
// name to definition (parameters, outcome keys, what it runs) and one from
// state-check key to definition. Validation, execution and the generated
// reference all read these registries, so they cannot disagree.
package steps

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/cdc"
	"github.com/outboxdrill/runner/diag"
	"github.com/outboxdrill/runner/internal/lazy"
	"github.com/outboxdrill/runner/internal/redact"
	"github.com/outboxdrill/runner/internal/safe"
	"github.com/outboxdrill/runner/pipeline"
	"github.com/outboxdrill/runner/state"
	"github.com/outboxdrill/runner/system"
)

// Key documents an outcome key of a step.
type Key struct {
	Name string
	Doc  string
}

// Def defines one step.
type Def struct {
	Name     string
	Doc      string
	Params   []Param
	Outcomes []Key

	paramsType reflect.Type
	run        func(ctx context.Context, env *Env, params any) (Result, error)
}

// Result is what a step did: its outcome counts, human-readable details for
// the trace (entry ids, reasons) and alerts.
type Result struct {
	Outcome map[string]int64
	Details []string
	// Alerts must reach the user even when the scenario passes and no -v
	// was given: an identity conflict is reported, never swallowed.
	Alerts []string
	// Observed is what the step's state checks read (the last attempt).
	Observed []Observation
	// NA are the step's state checks this broker cannot read.
	NA []NA
	// Entries are the broker entries the step published or handled, in order.
	Entries []Entry
	// Skipped, when set, says why the scenario cannot go on here (it is
	// reported as skipped, never as passed).
	Skipped string
	// Verbs are the run's broker's names of what the step did, for its
	// diagram (Exec sets them).
	Verbs broker.Verbs `json:"-"`
}

// Entry is one broker entry a step published or handled.
type Entry struct {
	EntryID string `json:"entry_id"`
	EventID string `json:"event_id"`
	Outcome string `json:"outcome"` // committed, published, purged, or a delivery's outcome (applied, duplicate, …)
	// Consumer is the consumer id of a delivery or a purge.
	Consumer string `json:"consumer,omitempty"`
	// Payload is what was committed, published or delivered; the history
	// checker compares it, reports leave it out.
	Payload string `json:"-"`
	Acked   bool   `json:"acked,omitempty"`
	// DeadLettered: moved to the dead-letter stream.
	DeadLettered bool `json:"dead_lettered,omitempty"`
	// Nacked: given back to the broker for redelivery (not acked).
	Nacked bool `json:"nacked,omitempty"`
	// Republish: published on purpose again (a replay, a reconcile, a raw
	// publish), not by a relay.
	Republish bool `json:"republish,omitempty"`
}

// Env is one scenario's world: its own producer and consumer databases and
// its own stream, plus what earlier steps produced.
type Env struct {
	Producer *pgxpool.Pool
	Consumer *pgxpool.Pool
	Broker   broker.Broker
	// BrokerName selects the per-broker overrides of expectations.
	BrokerName string
	// Consumers are the consumer ids the scenario's consuming steps name,
	// known before any of them runs: projection metrics judge each of them,
	// so a consumer stuck on its first event (no inbox row yet) still
	// counts as behind. Empty when the caller does not know them.
	Consumers []string

	auto      int                          // the last N given out as an auto id bus-N
	used      map[string]bool              // event ids produce was asked for
	transfers map[string]pipeline.Transfer // values committed per event id
	last      string                       // the most recently committed event id
	conflicts int64                        // identity conflicts reported so far
	// brokerDown: the scenario stopped or killed the broker, and has not
	// started it again. A relay then fails cleanly (OutcomeError).
	brokerDown bool

	// Map is where the outbox, inbox and projection are: nil for the
	// reference pipeline's tables, a team's with a system file.
	Map *state.Map
	// Services runs the team's services (a scenario with a system file);
	// nil otherwise. System is that file: produce runs its statement.
	Services Services
	System   *system.System
	// EventIDs turn the scenario's event names into the ids the team's
	// outbox holds (a uuid column gets uuids); the zero value keeps them.
	EventIDs system.EventIDs
	idNames  map[string]string // id → the name that gave it

	// Control acts on the servers' processes; nil when the runner did not
	// start them (external servers), and then process faults SKIP.
	Control ProcessControl

	// CDC is the scenario's logical replication slot on the producer
	// database, created before its first step when a step uses the CDC
	// relay (UsesCDC); nil otherwise. With it, "unpublished" means still in
	// the slot: committed after its confirmed LSN.
	CDC *cdc.Slot
}

// Server is a server a process-fault step acts on.
type Server string

// The servers a scenario can fault.
const (
	BrokerServer   Server = "broker"
	ProducerServer Server = "producer"
	ConsumerServer Server = "consumer"
)

// ProcessControl kills, stops and starts the servers the runner manages.
type ProcessControl interface {
	// Cannot says why the runner cannot fault server s, or "" when it can:
	// the scenario is then skipped with that reason.
	Cannot(s Server) string
	// Broker applies action (kill, stop, start, restart) to the broker.
	Broker(ctx context.Context, action string) error
	// Postgres applies action to the producer's or the consumer's server.
	Postgres(ctx context.Context, s Server, action string) error
}

// SkipError ends a scenario as skipped: it cannot prove anything here.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return "skipped: " + e.Reason }

// Mapping is the scenario's table mapping.
func (e *Env) Mapping() state.Map {
	if e.Map == nil {
		return state.Reference
	}
	return *e.Map
}

// nextAutoID is the next bus-N that no produce step of the scenario used.
func (e *Env) nextAutoID() string {
	for {
		e.auto++
		if id := fmt.Sprintf("bus-%d", e.auto); !e.used[id] {
			return id
		}
	}
}

// NewEnv returns a scenario environment on the given databases and stream.
func NewEnv(producer, consumer *pgxpool.Pool, b broker.Broker) *Env {
	return &Env{Producer: producer, Consumer: consumer, Broker: b, used: map[string]bool{}, transfers: map[string]pipeline.Transfer{}, idNames: map[string]string{}}
}

// registry holds the steps by name: the package's own, each file's list
// (a []*Def) named here, and those of other packages that Register added.
// Built on first use: each Define reads its parameters' struct by
// reflection, which a command that loads no scenario (version, reference)
// need not pay for at start.
var registry = lazy.Value("steps registry", func() map[string]*Def {
	return byName(slices.Concat(consumeDefs(), expectDefs(), overlapDefs(), processDefs(), produceDefs(), publishDefs(),
		recoveryDefs(), relayDefs(), serviceDefs(), sleepDefs(), slotDefs()))
})

func byName(defs []*Def) map[string]*Def {
	m := make(map[string]*Def, len(defs))
	for _, d := range defs {
		m[d.Name] = d
	}
	return m
}

// aliases map another spelling of a step to its name: the language's
// first description called PostgreSQL's process steps
// `producer`/`consumer`.
var aliases = map[string]string{"producer": "producer_db", "consumer": "consumer_db"}

// AliasesOf are the other spellings of step d, sorted.
func AliasesOf(d *Def) []string {
	var out []string
	for a, c := range aliases {
		if c == d.Name {
			out = append(out, a)
		}
	}
	sort.Strings(out)
	return out
}

// Define is the definition of a step whose parameters are the struct P.
// It registers nothing: the package's own steps are listed in registry,
// a step of another package is added with Register.
func Define[P any](name, doc string, outcomes []Key, run func(context.Context, *Env, *P) (Result, error)) *Def {
	t := reflect.TypeFor[P]()
	return &Def{
		Name: name, Doc: doc, Outcomes: outcomes,
		Params:     paramsOf(t),
		paramsType: t,
		run: func(ctx context.Context, env *Env, p any) (Result, error) {
			return run(ctx, env, p.(*P))
		},
	}
}

// Register adds steps defined outside this package (a team's own, or
// internal/stepfixture), by an explicit call of the program or test that
// uses them, before it loads a scenario.
func Register(defs ...*Def) {
	for _, d := range defs {
		registry()[d.Name] = d
	}
}

// Lookup finds a step by name.
func Lookup(name string) (*Def, bool) {
	if c, ok := aliases[name]; ok {
		name = c
	}
	d, ok := registry()[name]
	return d, ok
}

// Names lists the step names, sorted.
func Names() []string {
	names := make([]string, 0, len(registry()))
	for n := range registry() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Defs lists the step definitions in name order.
func Defs() []*Def {
	var ds []*Def
	for _, n := range Names() {
		ds = append(ds, registry()[n])
	}
	return ds
}

// DecodeParams turns args into the step's typed parameters.
func (d *Def) DecodeParams(args []Arg, pos diag.Pos) (any, diag.Errors) {
	return decodeParams(d.paramsType, d.Params, args, pos)
}

// Primary is the parameter a scalar step value stands for (`start: relay`),
// if the step has one.
func (d *Def) Primary() (Param, bool) {
	for _, p := range d.Params {
		if p.Primary {
			return p, true
		}
	}
	return Param{}, false
}

// Flags are the names of d's flag parameters (booleans: `broker(stop)`),
// in order.
func (d *Def) Flags() []string {
	var out []string
	for _, p := range d.Params {
		if p.Type() == "flag" {
			out = append(out, p.Name)
		}
	}
	return out
}

// ActionNeeded is implemented by parameters of steps that do nothing
// without one of their parameters (broker: {} is refused): the JSON Schema
// then wants at least one.
type ActionNeeded interface{ NeedsAction() }

// NeedsAction reports whether d's parameters implement ActionNeeded.
func (d *Def) NeedsAction() bool {
	_, ok := reflect.New(d.paramsType).Interface().(ActionNeeded)
	return ok
}

// IsExpect reports whether d is the expect step, whose map holds state checks
// rather than parameters.
func (d *Def) IsExpect() bool { return d.Name == expectStep }

func (d *Def) outcomeNames() []string {
	names := make([]string, len(d.Outcomes))
	for i, k := range d.Outcomes {
		names[i] = k.Name
	}
	return names
}

func (d *Def) hasOutcome(name string) bool {
	for _, k := range d.Outcomes {
		if k.Name == name {
			return true
		}
	}
	return false
}

// ParamValues lists the decoded parameters by name (defaults included;
// unset optional ones left out), for reports.
func (c *Call) ParamValues() map[string]any {
	v := reflect.ValueOf(c.Params).Elem()
	out := map[string]any{}
	for _, p := range c.Def.Params {
		f := v.FieldByIndex(p.index)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		if f.IsZero() && f.Kind() != reflect.Bool && p.Default == "" {
			continue
		}
		if d, ok := f.Interface().(time.Duration); ok {
			out[p.Name] = d.String()
			continue
		}
		if m, ok := paramStruct(f); ok {
			out[p.Name] = m
			continue
		}
		out[p.Name] = hidden(p.Name, f.Interface())
	}
	return out
}

// paramStruct is a parameter whose value is itself a struct of parameters
// (start's fault: {on, nth, do}) as the scenario writes it, keyed by the
// fields' param: names: a report must show the language's keys, not the Go
// field names (On, Nth, Do). False for any other value.
func paramStruct(v reflect.Value) (map[string]any, bool) {
	if v.Kind() != reflect.Struct {
		return nil, false
	}
	out := map[string]any{}
	t := v.Type()
	for i := range t.NumField() {
		sf, f := t.Field(i), v.Field(i)
		if sf.Anonymous && f.Kind() == reflect.Struct {
			m, _ := paramStruct(f)
			maps.Copy(out, m)
			continue
		}
		name := sf.Tag.Get("param")
		if name == "" || !sf.IsExported() || f.IsZero() {
			continue
		}
		if f.Kind() == reflect.Pointer {
			f = f.Elem()
		}
		if d, ok := f.Interface().(time.Duration); ok {
			out[name] = d.String()
		} else if m, ok := paramStruct(f); ok {
			out[name] = m
		} else {
			out[name] = hidden(name, f.Interface())
		}
	}
	return out, len(out) > 0 || hasParamTag(t)
}

// hasParamTag: some field of struct type t is a parameter.
func hasParamTag(t reflect.Type) bool {
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("param") != "" {
			return true
		}
	}
	return false
}

// hidden is a parameter's value for a report, its secrets hidden as shown
// hides them.
func hidden(key string, v any) any {
	switch v := v.(type) {
	case string:
		return redact.Param(key, v)
	case map[string]string:
		out := make(map[string]string, len(v))
		for k, x := range v {
			out[k] = redact.Param(k, x)
		}
		return out
	case []string:
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = redact.Param(key, x)
		}
		return out
	}
	return v
}

// Faults lists the faults the step injects, as written: "fail=divzero",
// "skip_mark", "skip_ack".
func (c *Call) Faults() []string {
	var fs []string
	vals := c.ParamValues()
	for _, p := range c.Def.Params {
		switch v := vals[p.Name].(type) {
		case bool:
			if v && p.Fault {
				fs = append(fs, p.Name)
			}
		case string:
			if p.Fault && v != "" {
				fs = append(fs, p.Name+"="+v)
			}
		}
	}
	return fs
}

// Call is one step of a scenario, fully decoded at load time.
type Call struct {
	Def    *Def
	Params any
	Args   []Arg // as written, for display
	Label  string
	Pos    diag.Pos
	Expect Expect
}

// String shows the step the way a user writes the shorthand.
func (c *Call) String() string {
	if len(c.Args) == 0 {
		return c.Def.Name
	}
	parts := make([]string, len(c.Args))
	for i, a := range c.Args {
		if a.Value.ShortTag() == "!!null" {
			parts[i] = a.Key
		} else {
			parts[i] = a.Key + "=" + safe.Cut(shown(a.Key, a.Value)) // a 2 MB event id: its start
		}
	}
	return c.Def.Name + "(" + strings.Join(parts, ", ") + ")"
}

// shown is a value as written, a map or list in YAML flow style: a start's
// fault shows as {on: consumer_db.commit(table=inbox), do: kill}. A
// secret in it is hidden (redact.Param): the value of a key that names one
// (env: {DB_PASSWORD: …}), a DSN's password=, a URL's password.
func shown(key string, n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		parts := make([]string, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			parts = append(parts, n.Content[i].Value+": "+shown(n.Content[i].Value, n.Content[i+1]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case yaml.SequenceNode:
		parts := make([]string, len(n.Content))
		for i, e := range n.Content {
			parts[i] = shown(key, e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case yaml.AliasNode:
		if n.Alias != nil {
			return shown(key, n.Alias)
		}
	case yaml.DocumentNode:
		if len(n.Content) == 1 {
			return shown(key, n.Content[0])
		}
	}
	return redact.Param(key, n.Value)
}

type callKey struct{}

// CallOf is the step whose Exec ctx comes from, nil outside one: what a
// step starts can say which step started it (a service's start position).
func CallOf(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
