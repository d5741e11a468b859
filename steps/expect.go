package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/outboxdrill/runner/broker"
	"github.com/outboxdrill/runner/diag"
)

// ErrorKey is the expect key that makes a step's failure the expected outcome.
const ErrorKey = "error"

// Expect is what a step must show: outcome counts, state checks and, with
// `error:`, the text of the error it must fail with.
type Expect struct {
	Outcomes []OutcomeWant
	Checks   []CheckWant
	Error    *ErrorWant
	// Within makes an expect step poll its checks, every Every, until they
	// all hold or Within has passed.
	Within, Every time.Duration
}

// Keys of an expect step that are not state checks.
const (
	WithinKey = "within"
	EveryKey  = "every"
)

// defaultEvery is the polling interval when within is given without every.
const defaultEvery = 10 * time.Millisecond

// OutcomeWant is one wanted outcome count. A boolean want (true/false) asks
// only whether the count is non-zero.
type OutcomeWant struct {
	Key    string
	Want   int64
	IsBool bool
	Pos    diag.Pos
	Broker string // "" for every broker, else only on that one (it overrides)
}

// CheckWant is one state check and its wanted value.
type CheckWant struct {
	Check  *Check
	Want   any
	Pos    diag.Pos
	Broker string // "" for every broker, else only on that one (it overrides)
}

// ErrorWant wants the step to fail with an error containing Substr.
type ErrorWant struct {
	Substr string
	Pos    diag.Pos
}

// Empty reports whether nothing is expected.
func (e Expect) Empty() bool { return len(e.Outcomes)+len(e.Checks) == 0 && e.Error == nil }

// CompileExpect decodes an expect map of step d. For the expect step it holds
// state checks only; for any other step also d's outcome keys and `error`.
// brokers are the keys of per-broker overrides (the loader's kinds).
func CompileExpect(d *Def, file string, pairs []Arg, brokers []string) (Expect, diag.Errors) {
	e, errs := compileExpect(d, file, pairs, brokers, "")
	if e.Within > 0 && e.Every == 0 {
		e.Every = defaultEvery
	}
	return e, errs
}

// compileExpect compiles pairs, brokers being the override keys; inside a
// broker's override map, broker names it and only outcomes and checks are
// allowed.
func compileExpect(d *Def, file string, pairs []Arg, brokers []string, broker string) (Expect, diag.Errors) {
	var e Expect
	var errs diag.Errors
	seen := map[string]bool{}
	for _, a := range pairs {
		if seen[a.Key] {
			errs = append(errs, diag.Errorf(a.KeyPos, "expect key %q given twice", a.Key))
			continue
		}
		seen[a.Key] = true
		errs = append(errs, compileExpectKey(d, file, a, broker, brokers, &e)...)
	}
	if seen[EveryKey] && !seen[WithinKey] {
		errs = append(errs, diag.Errorf(pairs[0].KeyPos, "every: polls only together with within, e.g. {within: 2s, every: 50ms}"))
	}
	return e, errs
}

// compileExpectKey compiles one key of an expect map into e: a broker's
// override, within/every, an outcome, a check or error.
func compileExpectKey(d *Def, file string, a Arg, broker string, brokers []string, e *Expect) diag.Errors {
	var errs diag.Errors
	pos := diag.NodePos(file, a.Value)
	switch {
	case slices.Contains(brokers, a.Key):
		if broker != "" {
			return diag.Errors{diag.Errorf(a.KeyPos, "%s: broker overrides do not nest (inside %s)", a.Key, broker)}
		}
		o, oerrs := compileOverride(d, file, a, brokers)
		e.Outcomes = append(e.Outcomes, o.Outcomes...)
		e.Checks = append(e.Checks, o.Checks...)
		return oerrs
	case broker != "" && (a.Key == WithinKey || a.Key == EveryKey || a.Key == ErrorKey):
		return diag.Errors{diag.Errorf(a.KeyPos, "%s: not allowed in a broker override; put it beside %s", a.Key, broker)}
	case d.IsExpect() && (a.Key == WithinKey || a.Key == EveryKey):
		dur, err := Duration(a.Value)
		if err != nil {
			errs = append(errs, diag.Errorf(pos, "%s: %v", a.Key, err))
		}
		if a.Key == WithinKey {
			e.Within = dur
		} else if e.Every = dur; err == nil && dur == 0 {
			errs = append(errs, diag.Errorf(pos, "every: must be at least 1ms, got 0 (leave it out for the default, %s)", defaultEvery))
		}
		return errs
	case !d.IsExpect() && d.hasOutcome(a.Key):
		ow, err := outcomeWant(a, pos)
		if err != nil {
			errs = append(errs, err)
		}
		ow.Broker = broker
		e.Outcomes = append(e.Outcomes, ow)
		return errs
	}
	if c, ok := checks()[a.Key]; ok {
		want, perrs := c.parse(file, a.Value)
		for _, pe := range perrs {
			errs = append(errs, diag.Errorf(pe.Pos, "%s: %s", a.Key, pe.Msg))
		}
		e.Checks = append(e.Checks, CheckWant{Check: c, Want: want, Pos: a.KeyPos, Broker: broker})
		return errs
	}
	if a.Key == ErrorKey && !d.IsExpect() {
		if a.Value.Kind != yaml.ScalarNode || a.Value.ShortTag() == "!!null" || a.Value.Value == "" {
			errs = append(errs, diag.Errorf(pos, "error: want the text the error must contain"))
		}
		e.Error = &ErrorWant{Substr: a.Value.Value, Pos: a.KeyPos}
		return errs
	}
	return diag.Errors{unknownExpectKey(d, a, broker, brokers)}
}

// unknownExpectKey says what is wrong with a key no expect map knows.
func unknownExpectKey(d *Def, a Arg, broker string, brokers []string) *diag.Error {
	if by := reportedBy(a.Key); d.IsExpect() && len(by) > 0 {
		return diag.Errorf(a.KeyPos, "%s is what %s reports: put it in that step's own expect (- %s:, then expect: {%s: ...} under it); a separate expect step checks state",
			a.Key, strings.Join(by, " or "), by[0], a.Key)
	}
	known, overrides := expectKeys(d), ""
	if broker == "" { // a broker's override is a key here too (rabitmq:)
		known = append(known, brokers...)
		overrides = "; or a broker's override: " + strings.Join(brokers, ", ")
	}
	hint := diag.Suggest(a.Key, known)
	if hint == "" && d.IsExpect() {
		if s := diag.Suggest(a.Key, allOutcomes()); s != "" {
			hint = s + ", an outcome: it goes in the step's own expect"
		}
	}
	return diag.Errorf(a.KeyPos, "unknown expect key %q for %s%s; known: %s%s",
		a.Key, d.Name, hint, strings.Join(expectKeys(d), ", "), overrides)
}

// reportedBy are the steps that report outcome key, sorted.
func reportedBy(key string) []string {
	var out []string
	for _, name := range Names() {
		if d, ok := Lookup(name); ok && d.hasOutcome(key) {
			out = append(out, name)
		}
	}
	return out
}

// allOutcomes are the outcome keys of every step.
func allOutcomes() []string {
	var out []string
	for _, name := range Names() {
		if d, ok := Lookup(name); ok {
			for _, k := range d.Outcomes {
				if !slices.Contains(out, k.Name) {
					out = append(out, k.Name)
				}
			}
		}
	}
	return out
}

// compileOverride compiles `nats: {stream.entries: 1}`: wants that apply on
// that broker only, in place of the common ones with the same key.
func compileOverride(d *Def, file string, a Arg, brokers []string) (Expect, diag.Errors) {
	if a.Value.Kind != yaml.MappingNode || len(a.Value.Content) == 0 {
		return Expect{}, diag.Errors{diag.Errorf(diag.NodePos(file, a.Value), "%s: want a map of what differs on %s, e.g. %s: {stream.entries: 1}", a.Key, a.Key, a.Key)}
	}
	var pairs []Arg
	for i := 0; i+1 < len(a.Value.Content); i += 2 {
		k := a.Value.Content[i]
		pairs = append(pairs, Arg{Key: k.Value, KeyPos: diag.NodePos(file, k), Value: a.Value.Content[i+1]})
	}
	return compileExpect(d, file, pairs, brokers, a.Key)
}

// For narrows the wants to one broker: its overrides replace the common
// wants with the same key; other brokers' overrides are dropped.
func (e Expect) For(broker string) Expect {
	over := map[string]bool{}
	for _, o := range e.Outcomes {
		if o.Broker == broker {
			over[o.Key] = true
		}
	}
	for _, c := range e.Checks {
		if c.Broker == broker {
			over[c.Check.Name] = true
		}
	}
	out := e
	out.Outcomes, out.Checks = nil, nil
	for _, o := range e.Outcomes {
		if o.Broker == broker || o.Broker == "" && !over[o.Key] {
			out.Outcomes = append(out.Outcomes, o)
		}
	}
	for _, c := range e.Checks {
		if c.Broker == broker || c.Broker == "" && !over[c.Check.Name] {
			out.Checks = append(out.Checks, c)
		}
	}
	return out
}

// Duration reads a duration node (500ms, 2s, 0).
func Duration(n *yaml.Node) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("want a duration such as 500ms, got %s", diag.Describe(n))
	}
	return parseMillis(n.Value)
}

func expectKeys(d *Def) []string {
	keys := []string{WithinKey, EveryKey}
	if !d.IsExpect() {
		keys = append(d.outcomeNames(), ErrorKey)
	}
	return append(keys, CheckNames()...)
}

func outcomeWant(a Arg, pos diag.Pos) (OutcomeWant, *diag.Error) {
	ow := OutcomeWant{Key: a.Key, Pos: a.KeyPos}
	if a.Value.Kind == yaml.ScalarNode {
		if a.Value.ShortTag() == "!!bool" && a.Value.Decode(&ow.IsBool) == nil {
			if ow.IsBool {
				ow.Want = 1
			}
			ow.IsBool = true
			return ow, nil
		}
		if a.Value.Decode(&ow.Want) == nil && ow.Want >= 0 {
			return ow, nil
		}
	}
	return ow, diag.Errorf(pos, "%s: want a count (0 or more) or true/false, got %s", a.Key, diag.Describe(a.Value))
}

// OutcomeError is a step's failure that is an outcome of the scenario's own
// fault, not an error of the scenario: a relay facing the broker the
// scenario stopped publishes nothing and marks nothing, and its outcome
// counts say so. The step goes on as done (Detail and Err in its trace);
// one that expects an error (expect: {error: ...}) gets Err as that error.
type OutcomeError struct {
	Err    error
	Detail string // what the failure did, as the trace says it before Err
}

func (e *OutcomeError) Error() string { return e.Err.Error() }
func (e *OutcomeError) Unwrap() error { return e.Err }

// Failure is one way a step did not do what its scenario said.
type Failure struct {
	Pos diag.Pos
	Key string // the outcome or check key, or "error"
	Msg string // want/got, or a -want +got diff
}

func (f Failure) String() string { return fmt.Sprintf("%s: %s: %s", f.Pos, f.Key, f.Msg) }

// Exec runs the step and judges it against its expectations.
func (c *Call) Exec(ctx context.Context, env *Env) (Result, []Failure) {
	res, err := c.Def.run(context.WithValue(ctx, callKey{}, c), env, c.Params)
	res.Verbs = verbs(env)
	var skip *SkipError
	if errors.As(err, &skip) {
		res.Skipped = skip.Reason
		return res, nil
	}
	if ctx.Err() != nil {
		return res, []Failure{{Pos: c.Pos, Key: ErrorKey, Msg: "step cancelled: " + context.Cause(ctx).Error()}}
	}
	want := c.Expect.For(env.BrokerName)
	var clean *OutcomeError
	if errors.As(err, &clean) && want.Error == nil {
		res.Details = append(res.Details, fmt.Sprintf("%s: %v", clean.Detail, clean.Err))
		err = nil
	}
	var fails []Failure
	switch w := want.Error; {
	case w != nil && err == nil:
		fails = append(fails, Failure{w.Pos, ErrorKey, fmt.Sprintf("want the step to fail with an error containing %q; it succeeded", w.Substr)})
	case w != nil && !strings.Contains(err.Error(), w.Substr):
		fails = append(fails, Failure{w.Pos, ErrorKey, fmt.Sprintf("want an error containing %q, got: %v", w.Substr, err)})
	case w == nil && err != nil:
		return res, []Failure{{c.Pos, ErrorKey, "step failed: " + err.Error()}}
	}
	outcomes, naOutcomes := applicableOutcomes(want.Outcomes, env)
	for _, o := range outcomes {
		if f, bad := o.judge(res.Outcome[o.Key]); bad {
			fails = append(fails, f)
			continue
		}
		res.Details = append(res.Details, "ok "+brokerKey(o.Key, o.Broker)+": "+o.wanted())
	}
	want, res.NA = want.applicable(env)
	res.NA = append(naOutcomes, res.NA...)
	cfails, obs, attempts := want.poll(ctx, env)
	if ctx.Err() != nil { // the deadline fell while reading or polling the state
		return res, []Failure{{Pos: c.Pos, Key: ErrorKey, Msg: "step cancelled: " + context.Cause(ctx).Error()}}
	}
	res.Observed = obs
	for _, o := range obs {
		if o.OK {
			res.Details = append(res.Details, fmt.Sprintf("ok %s: %s", brokerKey(o.Key, o.Broker), showValue(o.Got)))
		}
	}
	for _, n := range res.NA {
		res.Details = append(res.Details, n.Key+": "+n.Reason)
	}
	if want.Within > 0 && len(cfails) == 0 && len(want.Checks) > 0 {
		res.Details = append(res.Details, fmt.Sprintf("held after %d attempt(s)", attempts))
	}
	return res, append(fails, cfails...)
}

// brokerKey is a key as the trace shows it: with the broker whose override
// applied.
func brokerKey(key, broker string) string {
	if broker != "" {
		return key + " (" + broker + ")"
	}
	return key
}

// wanted is the outcome's wanted value as written.
func (o OutcomeWant) wanted() string {
	if o.IsBool {
		return fmt.Sprint(o.Want != 0)
	}
	return fmt.Sprint(o.Want)
}

// poll judges the checks once, or with Within until they all hold. A failure
// shows the last observed values and how many times they were read.
func (e Expect) poll(ctx context.Context, env *Env) ([]Failure, []Observation, int) {
	deadline := time.Now().Add(e.Within)
	for attempt := 1; ; attempt++ {
		fails, obs, permanent := e.judgeChecks(ctx, env)
		if e.Within == 0 || len(fails) == 0 {
			return fails, obs, attempt
		}
		if permanent != nil {
			// The query itself is wrong: every retry would fail alike, and
			// waiting out within would only hide the mistake behind a timeout.
			for i := range fails {
				fails[i].Msg += fmt.Sprintf("\n(SQLSTATE %s is permanent: not retried; attempt %d of within %s)", permanent.Code, attempt, e.Within)
			}
			return fails, obs, attempt
		}
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			for i := range fails {
				fails[i].Msg += fmt.Sprintf("\n(last of %d attempts within %s, every %s)", attempt, e.Within, e.Every)
			}
			return fails, obs, attempt
		}
		select { // the last attempt falls on the deadline
		case <-time.After(min(e.Every, left)):
		case <-ctx.Done():
		}
	}
}

func (o OutcomeWant) judge(got int64) (Failure, bool) {
	if o.IsBool {
		if (got != 0) == (o.Want != 0) {
			return Failure{}, false
		}
		return Failure{o.Pos, o.Key, fmt.Sprintf("want %t, got %d", o.Want != 0, got)}, true
	}
	if got == o.Want {
		return Failure{}, false
	}
	return Failure{o.Pos, o.Key, fmt.Sprintf("want %d, got %d", o.Want, got)}, true
}

// Observation is what one state check read, for traces and reports.
type Observation struct {
	Key string `json:"key"`
	// Broker names the broker whose override this want was; "" when common.
	Broker string `json:"broker,omitempty"`
	Want   any    `json:"want"`
	Got    any    `json:"got"`
	OK     bool   `json:"ok"`
}

// NA is a state check the broker cannot read: it is reported, not judged,
// and the rest of the scenario runs.
type NA struct {
	Pos    diag.Pos `json:"-"`
	Key    string   `json:"key"`
	Reason string   `json:"reason"` // "n/a on <broker>: <why, citing the broker's docs>"
}

func (n NA) String() string { return fmt.Sprintf("%s: %s: %s", n.Pos, n.Key, n.Reason) }

// applicable splits e's checks into those the broker can read and those it
// cannot (n/a, with the broker's documented reason).
func (e Expect) applicable(env *Env) (Expect, []NA) {
	if env.Broker == nil {
		return e, nil
	}
	caps := env.Broker.Capabilities()
	var na []NA
	var keep []CheckWant
	for _, cw := range e.Checks {
		if need := cw.Check.Needs; need != "" && !caps.Has(need) {
			na = append(na, NA{Pos: cw.Pos, Key: cw.Check.Name, Reason: NotApplicable(env.BrokerName, need)})
			continue
		}
		keep = append(keep, cw)
	}
	e.Checks = keep
	return e, na
}

// outcomeNeeds are the outcomes only a broker with a capability can count:
// a redelivery is known only where the broker counts deliveries.
var outcomeNeeds = map[string]broker.Capability{"redelivered": broker.DeliveryCount}

// applicableOutcomes splits outcome wants into those the broker can count
// and those it cannot (n/a, with the broker's documented reason).
func applicableOutcomes(os []OutcomeWant, env *Env) ([]OutcomeWant, []NA) {
	if env.Broker == nil {
		return os, nil
	}
	caps := env.Broker.Capabilities()
	var keep []OutcomeWant
	var na []NA
	for _, o := range os {
		if need, ok := outcomeNeeds[o.Key]; ok && !caps.Has(need) {
			na = append(na, NA{Pos: o.Pos, Key: o.Key, Reason: NotApplicable(env.BrokerName, need)})
			continue
		}
		keep = append(keep, o)
	}
	return keep, na
}

// AllNA are the checks calls would report n/a on broker b, whose
// capabilities are caps, when that is all they would judge there: no step
// expects an outcome or an error, and no state check is one b can read.
// nil when anything is judged (or no step checks anything). Exec reports
// the same n/a for each step it runs; the runner's gate skips such a
// scenario before it starts, never passing it by omission.
func AllNA(calls []*Call, b string, caps broker.Capabilities) []NA {
	var na []NA
	for _, c := range calls {
		want := c.Expect.For(b)
		if len(want.Outcomes) > 0 || want.Error != nil {
			return nil
		}
		for _, cw := range want.Checks {
			need := cw.Check.Needs
			if need == "" || caps.Has(need) {
				return nil // read and judged
			}
			na = append(na, NA{Pos: cw.Pos, Key: cw.Check.Name, Reason: NotApplicable(b, need)})
		}
	}
	return na
}

// NotApplicable is the n/a reason of something that needs c on broker b.
func NotApplicable(b string, c broker.Capability) string {
	why := broker.WhyNot(b, c)
	if why == "" {
		why = "undocumented" // a test holds every broker to documenting it
	}
	return fmt.Sprintf("n/a on %s (no %s): %s", b, c, why)
}

// judgeChecks reads every check's state once. permanent is the first
// error that no retry can cure (permanentSQL), nil when none.
func (e Expect) judgeChecks(ctx context.Context, env *Env) (fails []Failure, obs []Observation, permanent *pgconn.PgError) {
	for _, cw := range e.Checks {
		got, err := cw.Check.observe(ctx, env, cw.Want)
		if err != nil {
			if pg := permanentSQL(err); pg != nil && permanent == nil {
				permanent = pg
			}
			fails = append(fails, Failure{cw.Pos, cw.Check.Name, "cannot read the state: " + err.Error()})
			obs = append(obs, Observation{Key: cw.Check.Name, Broker: cw.Broker, Want: cw.Want, Got: err.Error()})
			continue
		}
		msg, bad := diffValues(cw.Want, got)
		if bad {
			fails = append(fails, Failure{cw.Pos, cw.Check.Name, msg})
		}
		obs = append(obs, Observation{Key: cw.Check.Name, Broker: cw.Broker, Want: cw.Want, Got: got, OK: !bad})
	}
	return fails, obs, permanent
}

// permanentSQL is err's PostgreSQL error when it is of class 42, syntax
// error or access rule violation (42703 undefined column, 42P01 undefined
// table, 42601 syntax error, 42501 insufficient privilege, …): the query
// is wrong, not the state early, so no retry can cure it. Otherwise nil.
func permanentSQL(err error) *pgconn.PgError {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && strings.HasPrefix(pg.Code, "42") {
		return pg
	}
	return nil
}

// diffValues compares a wanted and an observed value: "want 2, got 1" for numbers;
// for maps both values as YAML and a -want +got diff. Empty and missing maps
// are equal.
func diffValues(want, got any) (string, bool) {
	if w, ok := want.(interface{ wanted() any }); ok { // the value beside what says how to read it
		want = w.wanted()
	}
	if c, ok := want.(comparison); ok {
		if c.holds(got) {
			return "", false
		}
		return fmt.Sprintf("want %s, got %v", c, got), true
	}
	if cmp.Equal(want, got, cmpopts.EquateEmpty()) {
		return "", false
	}
	w, wok := want.(int64)
	g, gok := got.(int64)
	if wok && gok {
		return fmt.Sprintf("want %d, got %d", w, g), true
	}
	d := diffLines(want, got)
	if d == "" { // alike when shown: what differs is the kind of value
		d = fmt.Sprintf("- (a %T)\n+ (a %T)", want, got)
	}
	return fmt.Sprintf("want %s\n got %s\n(-want +got)\n%s", showValue(want), showValue(got), d), true
}
